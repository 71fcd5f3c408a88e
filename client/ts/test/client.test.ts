// Without a server: builders, error helpers, retries, the README excerpt.
// Against a real server: the session RPCs, GetToolOutput and CountTokens.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";

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
  fieldMask,
  listAllSessions,
  isIdempotent,
  messageText,
  toJson,
  toolCall,
  toolDefinition,
  toolResult,
  user,
  type CtxwardenClient,
  type Interceptor,
} from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

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

test("fieldMask converts camelCase paths", () => {
  assert.deepEqual(fieldMask("title", "systemPrompt", "pinned_state").paths, ["title", "system_prompt", "pinned_state"]);
});

function rejectsWith(code: Code, reason?: string): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof ConnectError, `not a ConnectError: ${String(e)}`);
    assert.equal(e.code, code, `code ${Code[e.code]}, expected ${Code[code]}`);
    if (reason !== undefined) {
      assert.equal(errorReason(e), reason);
    }
    return true;
  };
}

describe("session RPCs, GetToolOutput and CountTokens against a real ctxwarden server", () => {
  let server: RunningServer;
  let client: CtxwardenClient;

  before(async () => {
    server = await startServer();
    client = createClient(server.target, { timeoutMs: 10_000 });
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("ListSessions pages through the created sessions, newest first", async () => {
    const userId = `ts-owner-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push((await client.createSession({ session: { userId, title: `s${i}` } })).sessionId);
    }
    const other = await client.createSession({ session: { userId: `${userId}-other` } });

    const first = await client.listSessions({ userId, pageSize: 2 });
    assert.deepEqual(
      first.sessions.map((s) => s.sessionId),
      [ids[4], ids[3]],
    );
    assert.notEqual(first.nextPageToken, "");
    const second = await client.listSessions({ userId, pageSize: 2, pageToken: first.nextPageToken });
    assert.deepEqual(
      second.sessions.map((s) => s.sessionId),
      [ids[2], ids[1]],
    );
    const last = await client.listSessions({ userId, pageSize: 2, pageToken: second.nextPageToken });
    assert.deepEqual(
      last.sessions.map((s) => s.sessionId),
      [ids[0]],
    );
    assert.equal(last.nextPageToken, "");

    const all: string[] = [];
    for await (const s of listAllSessions(client, { userId, pageSize: 2 })) {
      assert.equal(s.userId, userId);
      all.push(s.sessionId);
    }
    assert.deepEqual(all, [...ids].reverse());
    assert.ok(!all.includes(other.sessionId));
  });

  test("UpdateSession changes the masked fields, bumps the etag, rejects a stale etag", async () => {
    const created = await client.createSession({
      session: { title: "before", systemPrompt: "Be terse.", pinnedState: "kept" },
    });
    const sessionId = created.sessionId;
    assert.notEqual(created.etag, "");

    const updated = await client.updateSession({
      session: { sessionId, title: "after", systemPrompt: "Be thorough.", pinnedState: "ignored" },
      updateMask: fieldMask("title", "systemPrompt"),
      etag: created.etag,
    });
    assert.equal(updated.title, "after");
    assert.equal(updated.systemPrompt, "Be thorough.");
    assert.equal(updated.pinnedState, "kept"); // not in the mask
    assert.notEqual(updated.etag, created.etag);

    await assert.rejects(
      client.updateSession({
        session: { sessionId, title: "stale write" },
        updateMask: fieldMask("title"),
        etag: created.etag,
      }),
      rejectsWith(Code.Aborted),
    );
    const fetched = await client.getSession({ sessionId });
    assert.equal(fetched.title, "after");
    assert.equal(fetched.systemPrompt, "Be thorough.");
    assert.equal(fetched.etag, updated.etag);
  });

  test("DeleteSession, then GetSession is NOT_FOUND", async () => {
    const { sessionId } = await client.createSession({ session: { title: "doomed" } });
    await client.appendMessages({ sessionId, messages: [user("hello")] });
    await client.deleteSession({ sessionId });
    await assert.rejects(client.getSession({ sessionId }), rejectsWith(Code.NotFound, "SESSION_NOT_FOUND"));
    const listed: string[] = [];
    for await (const s of listAllSessions(client)) {
      listed.push(s.sessionId);
    }
    assert.ok(!listed.includes(sessionId));
  });

  test("GetToolOutput reads byte ranges of a stored tool result", async () => {
    const { sessionId } = await client.createSession({ session: {} });
    const lines = Array.from({ length: 200 }, (_, i) => `line ${String(i).padStart(3, "0")}`);
    const output = lines.join("\n");
    const appended = await client.appendMessages({
      sessionId,
      messages: [
        user("read big.txt"),
        assistant("", [toolCall("call-1", "read", { path: "big.txt" })]),
        toolResult("call-1", output, { toolName: "read" }),
      ],
    });
    const seq = appended.messages[2]!.seq;

    const chunk = await client.getToolOutput({ sessionId, seq, offset: 9n, limit: 18n });
    assert.equal(chunk.content, output.slice(9, 27));
    assert.equal(chunk.content, "line 001\nline 002\n");
    assert.equal(chunk.totalBytes, BigInt(Buffer.byteLength(output)));
    assert.equal(chunk.totalLines, 200n);
    assert.equal(chunk.nextOffset, 27n);

    const rest = await client.getToolOutput({ sessionId, seq, offset: chunk.nextOffset });
    assert.equal(rest.content, output.slice(27));
    assert.equal(rest.nextOffset, 0n);

    await assert.rejects(client.getToolOutput({ sessionId, seq: 1n }), rejectsWith(Code.InvalidArgument));
  });

  test("CountTokens counts messages, tools and text", async () => {
    const tools = [toolDefinition("read", "Read a file", { type: "object", properties: { path: { type: "string" } } })];
    const messages = [user("What does setup.py do?"), assistant("Let me look.")];
    const counted = await client.countTokens({ model: "gpt-4o", messages, tools, text: "Summarise it." });
    assert.equal(counted.messageTokens.length, 2);
    assert.ok(counted.messageTokens.every((n) => n > 0n));
    assert.ok(counted.toolsTokens > 0n);
    assert.ok(counted.textTokens > 0n);
    assert.notEqual(counted.tokenizer, "");
    const onlyMessages = await client.countTokens({ model: "gpt-4o", messages });
    assert.deepEqual(onlyMessages.messageTokens, counted.messageTokens);
    const sum = onlyMessages.messageTokens.reduce((a, b) => a + b, 0n);
    assert.ok(onlyMessages.totalTokens >= sum);
    assert.equal(counted.totalTokens, onlyMessages.totalTokens + counted.toolsTokens + counted.textTokens);

    const short = await client.countTokens({ model: "gpt-4o", text: "hello" });
    const long = await client.countTokens({ model: "gpt-4o", text: "hello ".repeat(50) });
    assert.ok(short.totalTokens > 0n && short.totalTokens < long.totalTokens);
    assert.equal(long.totalTokens, long.textTokens);
    const heuristic = await client.countTokens({ text: "hello ".repeat(50), tokenizer: "heuristic" });
    assert.equal(heuristic.tokenizer, "heuristic");
    assert.equal(heuristic.exact, false);
  });
});
