// Without a server: builders, error helpers, retries, the README excerpt.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { test } from "node:test";

import {
  Code,
  ConnectError,
  MessageSchema,
  Role,
  StopReason,
  assistant,
  assistantError,
  createClient,
  errorReason,
  isIdempotent,
  messageText,
  toJson,
  toolCall,
  toolDefinition,
  toolResult,
  user,
  type Interceptor,
} from "../src/index.js";

test("message builders", () => {
  const u = user("hi");
  assert.equal(u.role, Role.USER);
  assert.equal(messageText(u), "hi");

  const call = toolCall("call-1", "read", { path: "a.txt" });
  assert.equal(call.argumentsJson, '{"path":"a.txt"}');
  assert.equal(toolCall("c", "n", '{"x":1}').argumentsJson, '{"x":1}');

  const a = assistant("Let me look.", [call]);
  assert.equal(a.role, Role.ASSISTANT);
  assert.equal(a.stopReason, StopReason.TOOL_USE);
  assert.deepEqual(
    a.content.map((b) => b.block.case),
    ["text", "toolCall"],
  );
  assert.equal(assistant("done").stopReason, StopReason.STOP);
  assert.equal(assistant("", [call]).content.length, 1);

  const r = toolResult("call-1", "contents", { toolName: "read" });
  assert.equal(r.role, Role.TOOL_RESULT);
  assert.equal(r.toolCallId, "call-1");
  assert.equal(r.toolName, "read");
  assert.equal(r.isError, false);

  const failed = assistantError("429 rate limit");
  assert.equal(failed.stopReason, StopReason.ERROR);
  assert.equal(failed.errorMessage, "429 rate limit");
  assert.equal(failed.content.length, 0);

  assert.deepEqual(toJson(MessageSchema, user("x", { messageId: "m-1", metadata: { k: "v" } })), {
    messageId: "m-1",
    role: "ROLE_USER",
    content: [{ text: { text: "x" } }],
    metadata: { k: "v" },
  });
  assert.equal(toolDefinition("read", "Read a file").parametersJson, '{"type":"object"}');
});

test("errorReason is undefined for errors without details", () => {
  assert.equal(errorReason(new Error("boom")), undefined);
  assert.equal(errorReason(new ConnectError("boom", Code.Internal)), undefined);
  assert.equal(errorReason(undefined), undefined);
});

test("idempotent calls", () => {
  assert.ok(isIdempotent("GetSession", {}));
  assert.ok(isIdempotent("BuildModelInput", { autoCompact: false }));
  assert.ok(!isIdempotent("BuildModelInput", { autoCompact: true }));
  assert.ok(!isIdempotent("AppendMessages", { messages: [{ messageId: "" }] }));
  assert.ok(isIdempotent("AppendMessages", { requestId: "r1", messages: [] }));
  assert.ok(isIdempotent("AppendMessages", { messages: [{ messageId: "a" }, { messageId: "b" }] }));
  assert.ok(!isIdempotent("CreateSession", {}));
  assert.ok(isIdempotent("CreateSession", { requestId: "r1" }));
  assert.ok(!isIdempotent("DeleteSession", {}));
  assert.ok(!isIdempotent("UpdateSession", {}));
});

async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const address = srv.address();
  assert.ok(address !== null && typeof address === "object");
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return address.port;
}

test("UNAVAILABLE is retried for idempotent calls only", async () => {
  const port = await closedPort();
  const attempts = new Map<string, number>();
  const count: Interceptor = (next) => async (req) => {
    attempts.set(req.method.name, (attempts.get(req.method.name) ?? 0) + 1);
    return await next(req);
  };
  const client = createClient(`127.0.0.1:${port}`, {
    retry: { maxAttempts: 3, initialBackoffMs: 5 },
    interceptors: [count],
  });
  try {
    await assert.rejects(client.getSession({ sessionId: "s" }), (e: unknown) => {
      return e instanceof ConnectError && e.code === Code.Unavailable;
    });
    await assert.rejects(client.appendMessages({ sessionId: "s", messages: [user("x")] }), (e: unknown) => {
      return e instanceof ConnectError && e.code === Code.Unavailable;
    });
  } finally {
    client.close();
  }
  assert.equal(attempts.get("GetSession"), 3);
  assert.equal(attempts.get("AppendMessages"), 1);
});

test("README quick start is an excerpt of examples/agent-loop.ts", () => {
  const example = readFileSync(new URL("../examples/agent-loop.ts", import.meta.url), "utf8");
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const region = /\/\/ #region quickstart\n([\s\S]*?)\n\s*\/\/ #endregion quickstart/.exec(example)?.[1];
  assert.ok(region !== undefined, "no quickstart region in the example");
  const dedented = region
    .split("\n")
    .map((line) => line.replace(/^ {2}/, ""))
    .join("\n");
  assert.ok(readme.includes(dedented), "README.md's quick start differs from the example's quickstart region");
});
