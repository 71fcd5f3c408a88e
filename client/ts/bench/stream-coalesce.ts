/**
 * Throughput of MessageStream with and without coalescing, against a real
 * ctxwarden server (SQLite in a temp dir; CTXWARDEN_BIN as for the tests):
 * N pipelined one-message sends to one session, each awaited only at the end.
 *
 *     cd client/ts && npx tsx bench/stream-coalesce.ts [N]
 */
import { createClient, openMessageStream, user } from "../src/index.js";
import { startServer } from "../test/server.js";

async function run(n: number, coalesce: boolean): Promise<{ seconds: number; requests: number }> {
  const server = await startServer();
  const client = createClient(server.target);
  try {
    const { sessionId } = await client.createSession({});
    const stream = openMessageStream(client, { coalesce });
    const started = process.hrtime.bigint();
    const sent = [];
    for (let i = 0; i < n; i++) {
      sent.push(stream.send({ sessionId, messages: [user(`message ${i} ${"x".repeat(200)}`)] }));
    }
    const answers = await Promise.all(sent);
    await stream.close();
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    if (answers.at(-1)?.lastSeq !== BigInt(n)) {
      throw new Error(`expected last_seq ${n}, got ${answers.at(-1)?.lastSeq}`);
    }
    return { seconds, requests: stream.written.length };
  } finally {
    client.close();
    await server.stop();
  }
}

const n = Number(process.argv[2] ?? 2000);
for (const coalesce of [false, true]) {
  const { seconds, requests } = await run(n, coalesce);
  console.log(
    `coalesce=${coalesce}: ${n} messages in ${requests} requests, ${seconds.toFixed(2)} s, ${Math.round(n / seconds)} messages/s`,
  );
}
