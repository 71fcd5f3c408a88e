// Coalesced streaming appends: two sends within the stream's window (2 ms by
// default) go out as one AppendMessagesRequest, and each send gets its own answer.
//
//   CTXWARDEN_TARGET   server address (default 127.0.0.1:50051)
//
// Run: npx tsx examples/message-stream.ts (test/message-stream-example.test.ts
// runs it). In your project, import from "@ctxwarden/client".
import { createClient, errorReason, openMessageStream, user } from "../src/index.js";

const client = createClient(process.env.CTXWARDEN_TARGET ?? "127.0.0.1:50051");
try {
  const { sessionId } = await client.createSession({});
  const stream = openMessageStream(client); // { coalesce: false } to opt out
  const [a, b] = await Promise.all([
    stream.send({ sessionId, messages: [user("one")] }),
    stream.send({ sessionId, messages: [user("two")] }),
  ]);
  await stream.close();
  console.log(a.lastSeq, b.lastSeq); // 1n 2n: an answer per send
  console.log(stream.written); // [ 2 ]: one request carried both messages
} catch (err) {
  console.error(`ctxwarden: ${String(err)} (reason ${errorReason(err)})`);
  process.exitCode = 1;
} finally {
  client.close();
}
