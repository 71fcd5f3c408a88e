/**
 * A client with an API key (README "Authentication and TLS"): the region
 * between the markers is the README's example, whole, with the import from
 * "@ctxwarden/client" there. Run it against a server that requires a key:
 *
 *     CTXWARDEN_TARGET=127.0.0.1:50051 CTXWARDEN_API_KEY=… npx tsx examples/auth.ts
 *
 * test/auth.test.ts runs it against a real server started with --api-keys-file.
 */
// #region readme-auth
import { createClient, user } from "../src/index.js";

const client = createClient(process.env.CTXWARDEN_TARGET ?? "127.0.0.1:50051", {
  apiKey: process.env.CTXWARDEN_API_KEY, // sent as "authorization: Bearer <key>" with every call
});
try {
  const { sessionId } = await client.createSession({ session: { systemPrompt: "You are a terse assistant." } });
  await client.appendMessages({ sessionId, messages: [user("What is ctxwarden?")] });
  const input = await client.buildModelInput({ sessionId });
  console.log(`session ${sessionId}: ${input.messages.length} message(s), ${input.tokens?.totalTokens} tokens`);
} finally {
  client.close();
}
// #endregion readme-auth
