// Against a real server: forks, archive/unarchive and long-term memory through
// the generated client and the paging helper.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Code,
  ConnectError,
  MemoryState,
  ModelInputFormat,
  createClient,
  errorReason,
  fieldMask,
  listAllMemories,
  messageText,
  user,
  type CtxwardenClient,
} from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

const unique = () => `${Date.now()}-${Math.random().toString(36).slice(2)}`;

describe("forks, lifecycle and memory against a real ctxwarden server", () => {
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

  test("ForkSession shares the history up to at_seq, then diverges", async () => {
    const { sessionId } = await client.createSession({ session: { systemPrompt: "Fork me." } });
    await client.appendMessages({ sessionId, messages: [user("one"), user("two"), user("three")] });
    const fork = await client.forkSession({ sessionId, atSeq: 3n });
    assert.equal(fork.parentSessionId, sessionId);
    assert.equal(fork.parentSeq, 2n);
    await client.appendMessages({ sessionId: fork.sessionId, messages: [user("other")] });
    const input = await client.buildModelInput({ sessionId: fork.sessionId });
    assert.deepEqual(input.messages.map(messageText), ["one", "two", "other"]);
    const forks = await client.listSessions({ parentSessionId: sessionId });
    assert.deepEqual(forks.sessions.map((s) => s.sessionId), [fork.sessionId]);
  });

  test("GetUsage totals what the provider reported, once per request_id", async () => {
    const { sessionId } = await client.createSession({ session: {} });
    await client.appendMessages({ sessionId, messages: [user("hi")] });
    const responseJson = JSON.stringify({
      id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o",
      choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "hello" } }],
      usage: { prompt_tokens: 20, completion_tokens: 3, total_tokens: 23 },
    });
    const output = {
      sessionId,
      format: ModelInputFormat.OPENAI_CHAT,
      output: { case: "responseJson" as const, value: responseJson },
      requestId: "turn-1",
    };
    await client.appendModelOutput(output);
    await client.appendModelOutput(output); // a retry: applied once
    const report = await client.getUsage({ sessionId });
    assert.equal(report.total?.inputTokens, 20n);
    assert.equal(report.total?.outputTokens, 3n);
    assert.deepEqual(report.models.map((m) => m.model), ["gpt-4o"]);
  });

  test("an archived session is read-only until UnarchiveSession", async () => {
    const { sessionId } = await client.createSession({ session: {} });
    await client.appendMessages({ sessionId, messages: [user("kept")] });
    const archived = await client.archiveSession({ sessionId });
    assert.ok(archived.archiveTime !== undefined);
    await assert.rejects(client.appendMessages({ sessionId, messages: [user("no")] }), (err) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(err.code, Code.FailedPrecondition);
      assert.equal(errorReason(err), "SESSION_ARCHIVED");
      return true;
    });
    const read = await client.buildModelInput({ sessionId });
    assert.deepEqual(read.messages.map(messageText), ["kept"]);
    const back = await client.unarchiveSession({ sessionId });
    assert.equal(back.archiveTime, undefined);
    await client.appendMessages({ sessionId, messages: [user("again")] });
  });

  test("memories: create (upsert by key), get, list, update, delete", async () => {
    const userId = `ts-mem-${unique()}`;
    const first = await client.createMemory({ memory: { userId, key: "lang", text: "Prefers Go." } });
    const upserted = await client.createMemory({ memory: { userId, key: "lang", text: "Prefers TS." } });
    assert.equal(upserted.memoryId, first.memoryId);
    await client.createMemory({ memory: { userId, text: "Works late.", pinned: true } });
    assert.equal((await client.getMemory({ memoryId: first.memoryId })).text, "Prefers TS.");
    const all = [];
    for await (const m of listAllMemories(client, { userId, pageSize: 1 })) {
      all.push(m.text);
    }
    assert.deepEqual(all.sort(), ["Prefers TS.", "Works late."]);
    const updated = await client.updateMemory({
      memory: { memoryId: first.memoryId, state: MemoryState.PROPOSED },
      updateMask: fieldMask("state"),
    });
    assert.equal(updated.state, MemoryState.PROPOSED);
    await client.deleteMemory({ memoryId: first.memoryId });
    await assert.rejects(client.getMemory({ memoryId: first.memoryId }), (err) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(err.code, Code.NotFound);
      return true;
    });
  });
});
