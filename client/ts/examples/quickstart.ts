// Drives one ctxwarden session: the user's question, the model input, a tool
// call and its result, a failed model call rolled back, the answer. The model
// is played by fixed messages; the calls are real.
//
//   CTXWARDEN_TARGET   server address (default 127.0.0.1:50051)
//   CTXWARDEN_API_KEY  API key, when the server requires one (--api-keys-file)
//   CTXWARDEN_TLS_CA   CA certificate (PEM) of a TLS server; without it the
//                      connection is plaintext, for a server on loopback
//
// Run: npx tsx examples/quickstart.ts (test/quickstart.test.ts runs it).
import { readFileSync } from "node:fs";

import {
  RecoveryAction,
  Role,
  assistant,
  assistantError,
  createClient,
  errorReason,
  messageToolCalls,
  toolCall,
  toolDefinition,
  toolResult,
  user,
} from "../src/index.js";

const target = process.env.CTXWARDEN_TARGET ?? "127.0.0.1:50051";
const ca = process.env.CTXWARDEN_TLS_CA;
const client = createClient(ca ? `https://${target}` : target, {
  apiKey: process.env.CTXWARDEN_API_KEY, // "authorization: Bearer <key>"; plaintext to loopback only
  ...(ca ? { tls: { ca: readFileSync(ca) } } : {}),
});
try {
  // 1. A session with a system prompt and the tools the model may call.
  const read = toolDefinition("read", "Read a file", {
    type: "object",
    properties: { path: { type: "string" } },
    required: ["path"],
  });
  const session = await client.createSession({
    session: { systemPrompt: "You are a careful coding agent. Read files before answering.", tools: [read] },
  });
  const sessionId = session.sessionId;

  // 2. The user asks; ctxwarden says what to send to the model.
  await client.appendMessages({ sessionId, messages: [user("What does setup.py do?")] });
  let input = await client.buildModelInput({ sessionId });
  console.log(`model input: ${input.messages.length} messages, ${input.tokens?.totalTokens} tokens`);

  // 3. The model calls a tool: the agent runs each call and records its result.
  const answer = assistant("Let me look.", [toolCall("call-1", "read", { path: "setup.py" })]);
  await client.appendMessages({ sessionId, messages: [answer] });
  for (const call of messageToolCalls(answer)) {
    console.log(`tool call: ${call.name} ${call.argumentsJson}`);
    const output = 'from setuptools import setup\nsetup(name="demo")\n';
    await client.appendMessages({ sessionId, messages: [toolResult(call.id, output, { toolName: call.name })] });
  }

  // 4. The next model call fails: record it, then ask ctxwarden what to do.
  await client.appendMessages({ sessionId, messages: [assistantError("429 rate limit exceeded")] });
  const rollback = await client.rollbackTurn({ sessionId });
  console.log(`rollback: ${RecoveryAction[rollback.action]}`);
  // A real agent waits durationMs(rollback.retryAfter) and calls the model again.

  // 5. The retried call answers.
  await client.appendMessages({ sessionId, messages: [assistant("setup.py packages the project as demo.")] });
  input = await client.buildModelInput({ sessionId });
  console.log(`model input: ${input.messages.length} messages: ${input.messages.map((m) => Role[m.role]).join(" ")}`);
} catch (err) {
  console.error(`ctxwarden: ${String(err)} (reason ${errorReason(err)})`);
  process.exitCode = 1;
} finally {
  client.close();
}
