// CtxwardenSession with @openai/agents-core 0.20 (this directory's own
// dependency): the SDK's Runner drives replaceHistoryWithCompaction (a model
// output with a provider `compaction` item) and applyHistoryTransaction (an
// output guardrail that blocks the answer), against a real ctxwarden server.
// No history is deleted: ListMessages keeps every message, ListCompactions the checkpoint.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Agent,
  OutputGuardrailTripwireTriggered,
  Runner,
  Usage,
  tool,
  isSessionHistoryTransactionAwareSession,
  type AgentInputItem,
  type AgentOutputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type SessionHistoryTransactionAwareSession,
  type StreamEvent,
} from "@openai/agents-core";

import { z } from "zod";

import { Code, ConnectError, MessageState, createClient, errorReason, type CtxwardenClient } from "../../src/index.js";
import { CtxwardenSession, PROVIDER_COMPACTION_SUMMARY } from "../../src/openai-agents.js";
import { startServer, type RunningServer } from "../../test/server.js";

const said = (text: string): AgentOutputItem => ({
  type: "message",
  role: "assistant",
  status: "completed",
  content: [{ type: "output_text", text }],
});
const userItem = (text: string): AgentInputItem => ({ role: "user", content: [{ type: "input_text", text }] });

// Checked by `tsc -p compat/agents-core-0.20` (npm run test:compat): the
// session implements 0.20's optional interfaces with 0.20's own types.
export const asTransactionAware = (c: CtxwardenClient): SessionHistoryTransactionAwareSession => new CtxwardenSession(c);

/** A Model (the SDK's own interface) answering call N with outputs[N]; records each request's input. */
class FakeModel implements Model {
  readonly inputs: AgentInputItem[][] = [];
  constructor(private readonly outputs: AgentOutputItem[][]) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = typeof request.input === "string" ? [userItem(request.input)] : structuredClone(request.input);
    this.inputs.push(input);
    const output = this.outputs.shift();
    assert.ok(output !== undefined, `unexpected model call ${this.inputs.length}`);
    return {
      usage: new Usage({ requests: 1, inputTokens: 10, outputTokens: 5, totalTokens: 15 }),
      output,
      responseId: `resp-${this.inputs.length}`,
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("FakeModel does not stream");
  }
}

function texts(items: AgentInputItem[]): string[] {
  return items.map((item) => {
    const i = item as { type?: string; role?: string; content?: unknown; encrypted_content?: string };
    if (i.type === "compaction") {
      return `compaction:${i.encrypted_content}`;
    }
    if (i.type === "function_call" || i.type === "function_call_result") {
      return `${i.type}:${(item as { callId: string }).callId}`;
    }
    const content = i.content;
    const text = typeof content === "string" ? content : (content as { text?: string }[]).map((c) => c.text).join("");
    return `${i.role}:${text}`;
  });
}

describe("CtxwardenSession with @openai/agents-core 0.20", () => {
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

  test("the SDK sees the session as transaction-aware", () => {
    assert.equal(isSessionHistoryTransactionAwareSession(new CtxwardenSession(client)), true);
  });

  test("the Runner's compaction replaces the history with a checkpoint; nothing is deleted", async () => {
    const compaction = { type: "compaction", encrypted_content: "enc-summary-of-turns-1-2" } as AgentOutputItem;
    const model = new FakeModel([[said("answer 1")], [said("answer 2")], [compaction, said("answer 3")], [said("answer 4")]]);
    const agent = new Agent({ name: "compacting", instructions: "Be brief.", model });
    const session = new CtxwardenSession(client, { sessionId: "oa20-compaction" });
    const runner = new Runner({ tracingDisabled: true });
    for (const question of ["question 1", "question 2", "question 3", "question 4"]) {
      await runner.run(agent, question, { session });
    }

    // Turn 4's request: the compaction item replaced turns 1-3 (the SDK sends the
    // history from the latest compaction item on).
    assert.deepEqual(texts(model.inputs[3]!), [
      "compaction:enc-summary-of-turns-1-2",
      "assistant:answer 3",
      "user:question 4",
    ]);
    // The session's items: the checkpoint's summary, then the compaction item onwards.
    const items = texts(await session.getItems());
    assert.ok(items[0]!.startsWith("user:") && items[0]!.includes(PROVIDER_COMPACTION_SUMMARY), items[0]);
    assert.deepEqual(items.slice(1), [
      "compaction:enc-summary-of-turns-1-2",
      "assistant:answer 3",
      "user:question 4",
      "assistant:answer 4",
    ]);
    // The whole history is still there, nothing rolled back or deleted, and one checkpoint.
    // (Question 3 came before the compaction item in the same turn: the SDK
    // hands only the compaction item onwards to the session, so it is stored
    // inside that item, as the provider compacted it.)
    const listed = await client.listMessages({ sessionId: "oa20-compaction", includeRolledBack: true });
    assert.equal(listed.messages.length, 7);
    assert.ok(listed.messages.every((m) => m.state !== MessageState.ROLLED_BACK));
    const { compactions } = await client.listCompactions({ sessionId: "oa20-compaction" });
    assert.equal(compactions.length, 1);
    assert.equal(compactions[0]!.summary, PROVIDER_COMPACTION_SUMMARY);
    // It keeps the compaction item's message (with answer 3) onwards.
    assert.equal(compactions[0]!.firstKeptSeq, listed.messages[4]!.seq);
  });

  test("an output guardrail's blocked answer goes through applyHistoryTransaction", async () => {
    const call = { type: "function_call", callId: "call-1", name: "lookup", arguments: "{}", status: "completed" } as AgentOutputItem;
    const model = new FakeModel([[said("fine answer")], [call], [said("SECRET answer")]]);
    let lookups = 0;
    const lookup = tool({
      name: "lookup",
      description: "Looks something up.",
      parameters: z.object({}),
      execute: async () => `found ${++lookups}`,
    });
    const agent = new Agent({
      name: "guarded",
      model,
      tools: [lookup],
      outputGuardrails: [
        {
          name: "no secrets",
          execute: async ({ agentOutput }) => ({
            tripwireTriggered: String(agentOutput).includes("SECRET"),
            outputInfo: {},
          }),
        },
      ],
    });
    const session = new CtxwardenSession(client, { sessionId: "oa20-guardrail" });
    const applied: string[] = [];
    const original = session.applyHistoryTransaction.bind(session);
    session.applyHistoryTransaction = async (args) => {
      applied.push(args.transaction.type);
      await original(args);
    };
    const runner = new Runner({ tracingDisabled: true });
    await runner.run(agent, "first", { session });
    await assert.rejects(runner.run(agent, "second", { session }), OutputGuardrailTripwireTriggered);
    assert.ok(applied.length > 0, "the Runner never called applyHistoryTransaction");
    assert.ok(applied.every((t) => t === "append_items"), applied.join());
    // The blocked answer is not in the session; the question and the tool call that ran are.
    assert.equal(lookups, 1);
    assert.deepEqual(texts(await session.getItems()), [
      "user:first",
      "assistant:fine answer",
      "user:second",
      "function_call:call-1",
      "function_call_result:call-1",
    ]);
  });

  test("append_items: a retried operation is applied once; another transaction under its ID fails", async () => {
    const session = new CtxwardenSession(client, { sessionId: "oa20-append" });
    const args = { operationId: "run-1:1:append:0:1", transaction: { type: "append_items" as const, items: [userItem("once")] } };
    await session.applyHistoryTransaction(args);
    await session.applyHistoryTransaction(structuredClone(args));
    assert.deepEqual(texts(await session.getItems()), ["user:once"]);
    const other = { ...args, transaction: { type: "append_items" as const, items: [userItem("twice")] } };
    await assert.rejects(session.applyHistoryTransaction(other), (err: unknown) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(errorReason(err), "REQUEST_ID_REUSED");
      return true;
    });
    assert.deepEqual(texts(await session.getItems()), ["user:once"]);
  });

  test("replace_suffix: replaces a matching suffix (rolled back, not deleted); refuses a stale one", async () => {
    const session = new CtxwardenSession(client, { sessionId: "oa20-replace" });
    await session.addItems([userItem("q1")]);
    await session.addItems([said("a1") as AgentInputItem]);
    await session.addItems([userItem("q2")]);
    await session.addItems([said("blocked") as AgentInputItem]);
    const transaction = {
      type: "replace_suffix" as const,
      expectedSuffix: [said("blocked") as AgentInputItem],
      replacement: [said("accepted") as AgentInputItem, userItem("q3")],
    };
    await session.applyHistoryTransaction({ operationId: "op-replace", transaction });
    assert.deepEqual(texts(await session.getItems()), ["user:q1", "assistant:a1", "user:q2", "assistant:accepted", "user:q3"]);
    // A retry of the applied transaction succeeds and changes nothing.
    await session.applyHistoryTransaction({ operationId: "op-replace", transaction });
    assert.equal((await session.getItems()).length, 5);
    const listed = await client.listMessages({ sessionId: "oa20-replace", includeRolledBack: true });
    assert.deepEqual(
      listed.messages.filter((m) => m.state === MessageState.ROLLED_BACK).length,
      1,
      "the replaced message stays in the history, rolled back",
    );
    // A suffix that no longer matches: FAILED_PRECONDITION, nothing changed.
    const stale = { type: "replace_suffix" as const, expectedSuffix: [said("blocked") as AgentInputItem], replacement: [said("x") as AgentInputItem] };
    await assert.rejects(session.applyHistoryTransaction({ operationId: "op-stale", transaction: stale }), (err: unknown) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(err.code, Code.FailedPrecondition);
      return true;
    });
    assert.equal((await session.getItems()).length, 5);
  });

  test("replace_suffix: a retry after the rollback was applied and the append was not completes it", async () => {
    const seed = new CtxwardenSession(client, { sessionId: "oa20-resume" });
    await seed.addItems([userItem("q1")]);
    await seed.addItems([said("a1") as AgentInputItem]);
    await seed.addItems([said("blocked") as AgentInputItem]);
    // The process "dies" between the two calls: its append never reaches the server.
    const dying = Object.assign(Object.create(client) as CtxwardenClient, {
      appendModelOutput: () => Promise.reject(new Error("process died")),
    });
    const transaction = {
      type: "replace_suffix" as const,
      expectedSuffix: [said("blocked") as AgentInputItem],
      replacement: [said("accepted") as AgentInputItem],
    };
    const args = { operationId: "op-resume", transaction };
    await assert.rejects(new CtxwardenSession(dying, { sessionId: "oa20-resume" }).applyHistoryTransaction(args), /process died/);
    assert.deepEqual(texts(await seed.getItems()), ["user:q1", "assistant:a1"], "rolled back, not yet replaced");
    // The retry (same operation, a new process) finishes the replacement, once.
    const retried = new CtxwardenSession(client, { sessionId: "oa20-resume" });
    await retried.applyHistoryTransaction(args);
    await retried.applyHistoryTransaction(args);
    assert.deepEqual(texts(await retried.getItems()), ["user:q1", "assistant:a1", "assistant:accepted"]);
    // An operation whose rollback never happened: its suffix is gone, so it fails and changes nothing.
    const other = {
      operationId: "op-never-applied",
      transaction: { ...transaction, replacement: [said("other") as AgentInputItem] },
    };
    await assert.rejects(retried.applyHistoryTransaction(other), (err: unknown) => err instanceof ConnectError && err.code === Code.FailedPrecondition);
    assert.equal((await retried.getItems()).length, 3);
  });
});
