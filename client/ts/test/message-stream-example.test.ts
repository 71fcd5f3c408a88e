// examples/message-stream.ts, the program docs/guides/typescript-compaction.md
// shows, runs against a real ctxwarden server: two sends, one request, an
// answer per send, both messages stored in order.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { createClient, messageText, type CtxwardenClient } from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

let server: RunningServer;
let client: CtxwardenClient;

before(async () => {
  server = await startServer();
  client = createClient(server.target);
});

after(async () => {
  client?.close();
  await server?.stop();
});

test("the coalescing example: one request with both messages, an answer per send", async () => {
  const cwd = fileURLToPath(new URL("..", import.meta.url));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("CTXWARDEN_")));
  const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", "examples/message-stream.ts"], {
    cwd,
    env: { ...env, CTXWARDEN_TARGET: server.target },
    timeout: 60_000,
  });
  assert.deepEqual(stdout.trim().split("\n"), ["1n 2n", "[ 2 ]"]);

  const { sessions } = await client.listSessions({});
  assert.equal(sessions.length, 1);
  const { messages } = await client.listMessages({ sessionId: sessions[0]!.sessionId });
  assert.deepEqual(
    messages.map((m) => [m.seq, messageText(m)]),
    [
      [1n, "one"],
      [2n, "two"],
    ],
  );
});
