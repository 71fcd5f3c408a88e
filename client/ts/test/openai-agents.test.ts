// CtxwardenSession, the @openai/agents Session, against a real ctxwarden
// server: the Session contract (the behaviour the SDK's own MemorySession is
// tested for), items stored as ctxwarden messages, a real Runner with the
// scripted model (test/scripted-model.ts), compaction applying to what the agent reads back.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Agent, Runner, tool, type AgentInputItem } from "@openai/agents-core";
import { ScriptedModel, assistantMessage, functionCall } from "./scripted-model.js";
import { z } from "zod";

import {
  ModelInputFormat,
  Role,
  createClient,
  messageText,
  messageToolCalls,
  type CtxwardenClient,
} from "../src/index.js";
import { CtxwardenSession, fromResponsesInput, toResponsesItem } from "../src/openai-agents.js";
import { startServer, type RunningServer } from "./server.js";

const userItem = (text: string): AgentInputItem => ({ role: "user", content: [{ type: "input_text", text }] });

describe("CtxwardenSession against a real ctxwarden server", () => {
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

  test("stores and retrieves items; getItems(limit); popItem; clearSession", async () => {
    const session = new CtxwardenSession(client, { sessionId: "agents-1", session: { systemPrompt: "Be brief." } });
    assert.equal(await session.getSessionId(), "agents-1");
    assert.deepEqual(await session.getItems(), []);

    const initial = [userItem("hello")];
    await session.addItems(initial);
    assert.deepEqual(await session.getItems(), initial);

    const added = [userItem("one"), userItem("two")];
    await session.addItems(added);
    assert.deepEqual(await session.getItems(), [...initial, ...added]);
    assert.deepEqual(await session.getItems(2), added);
    assert.deepEqual(await session.getItems(0), []);

    assert.deepEqual(await session.popItem(), added[1]);
    assert.deepEqual(await session.getItems(), [...initial, added[0]]);
    // The popped message is rolled back, not deleted: ListMessages still has it.
    const listed = await client.listMessages({ sessionId: "agents-1", includeRolledBack: true });
    assert.equal(listed.messages.length, 3);

    await session.clearSession();
    assert.equal(await session.getSessionId(), "agents-1");
    assert.deepEqual(await session.getItems(), []);
    assert.deepEqual(await session.getItems(3), []);
    assert.equal(await session.popItem(), undefined);
    assert.equal((await client.getSession({ sessionId: "agents-1" })).systemPrompt, "Be brief.");
  });

  test("returns copies: changing what getItems returned changes nothing stored", async () => {
    const session = new CtxwardenSession(client);
    await session.addItems([userItem("start")]);
    const items = await session.getItems();
    (items[0] as { content: unknown }).content = "mutated";
    assert.deepEqual(await session.getItems(), [userItem("start")]);
  });

  test("items are ctxwarden messages: user, assistant with its tool call, tool result", async () => {
    const session = new CtxwardenSession(client, { session: { systemPrompt: "You read files." } });
    const items: AgentInputItem[] = [
      userItem("What is in a.txt? ça va 🙂"),
      assistantMessage("Let me look."),
      functionCall("read", { path: "a.txt" }, { callId: "call-1" }),
      { type: "function_call_result", callId: "call-1", name: "read", status: "completed", output: "hello from a.txt" },
      assistantMessage("It says hello."),
    ];
    await session.addItems(items);
    const sessionId = await session.getSessionId();
    const { messages } = await client.listMessages({ sessionId });
    assert.deepEqual(
      messages.map((m) => m.role),
      [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT, Role.ASSISTANT],
    );
    assert.equal(messageText(messages[0]!), "What is in a.txt? ça va 🙂");
    assert.equal(messageText(messages[1]!), "Let me look.");
    assert.deepEqual(
      messageToolCalls(messages[1]!).map((c) => [c.id, c.name, JSON.parse(c.argumentsJson)]),
      [["call-1", "read", { path: "a.txt" }]],
    );
    assert.equal(messages[2]!.toolCallId, "call-1");
    assert.equal(messageText(messages[2]!), "hello from a.txt");
    assert.deepEqual(messages.map((m) => Object.keys(m.metadata).length), [0, 0, 0, 0]);

    // Read back as the model sees them, in the Agents SDK's item shapes.
    const back = await session.getItems();
    assert.deepEqual(back, [
      userItem("What is in a.txt? ça va 🙂"),
      { role: "assistant", status: "completed", content: [{ type: "output_text", text: "Let me look." }] },
      { type: "function_call", callId: "call-1", name: "read", arguments: '{"path":"a.txt"}', status: "completed" },
      { type: "function_call_result", callId: "call-1", name: "read", status: "completed", output: "hello from a.txt" },
      { role: "assistant", status: "completed", content: [{ type: "output_text", text: "It says hello." }] },
    ]);
    // popItem removes the newest message: the last assistant answer.
    assert.deepEqual(await session.popItem(), back[4]);
    assert.deepEqual(await session.getItems(), back.slice(0, 4));
  });

  test("a Runner with a tool: the second run sees the first, stored in ctxwarden", async () => {
    const model = new ScriptedModel([
      [functionCall("read", { path: "a.txt" }, { callId: "call-1" })],
      [assistantMessage("a.txt says hello.")],
      [assistantMessage("You asked about a.txt.")],
    ]);
    const read = tool({
      name: "read",
      description: "Read a file",
      parameters: z.object({ path: z.string() }),
      execute: async ({ path }) => `hello from ${path}`,
    });
    const agent = new Agent({ name: "reader", instructions: "You read files.", model, tools: [read] });
    const session = new CtxwardenSession(client, { session: { systemPrompt: "You read files." } });

    const runner = new Runner({ tracingDisabled: true });
    const first = await runner.run(agent, "What is in a.txt?", { session });
    assert.equal(first.finalOutput, "a.txt says hello.");
    const second = await runner.run(agent, "What did I ask?", { session });
    assert.equal(second.finalOutput, "You asked about a.txt.");
    model.assertComplete();

    // The third model call got the whole history from the session.
    const input = model.lastCall!.request.input;
    assert.ok(Array.isArray(input));
    const texts = JSON.stringify(input);
    for (const expected of ["What is in a.txt?", "hello from a.txt", "a.txt says hello.", "What did I ask?"]) {
      assert.ok(texts.includes(expected), `the last model call's input lacks ${expected}: ${texts}`);
    }
    const { messages } = await client.listMessages({ sessionId: await session.getSessionId() });
    assert.deepEqual(
      messages.map((m) => m.role),
      [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT, Role.ASSISTANT, Role.USER, Role.ASSISTANT],
    );
  });

  test("compaction applies: after Compact, getItems starts with the summary and keeps the recent items", async (t) => {
    // A server with a summariser.
    const summarizing = await startServer(["--summarizer", "extractive"]);
    const client = createClient(summarizing.target);
    t.after(async () => {
      client.close();
      await summarizing.stop();
    });
    const session = new CtxwardenSession(client, { session: { systemPrompt: "Be brief." } });
    for (let i = 0; i < 12; i++) {
      await session.addItems([userItem(`question ${i}: ${"words ".repeat(200)}`), assistantMessage(`answer ${i}`)]);
    }
    const sessionId = await session.getSessionId();
    const whole = await session.getItems();
    assert.equal(whole.length, 24);
    await client.compact({ sessionId, keepRecentTokens: 400n });
    const compacted = await session.getItems();
    assert.ok(compacted.length < whole.length, `${compacted.length} items after compaction`);
    assert.deepEqual(compacted.at(-1), whole.at(-1));
    const rendered = await client.buildModelInput({ sessionId, format: ModelInputFormat.OPENAI_RESPONSES });
    assert.notEqual(rendered.summary, "");
    assert.ok(JSON.stringify(compacted).includes(rendered.summary.slice(0, 40)), "the summary is among the items");
  });

  test("item conversion: Agents SDK items to Responses input items and back", () => {
    const items: AgentInputItem[] = [
      { role: "user", content: [{ type: "input_image", image: "data:image/png;base64,iVBORw0KGgo=" }] },
      { role: "user", content: "plain" },
      { type: "reasoning", content: [{ type: "input_text", text: "thinking" }], providerData: { encryptedContent: "enc" } },
    ];
    const wire = items.map(toResponsesItem);
    assert.deepEqual(wire[0], {
      type: "message",
      role: "user",
      content: [{ type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=" }],
    });
    assert.deepEqual(wire[2], { type: "reasoning", summary: [{ type: "summary_text", text: "thinking" }], encrypted_content: "enc" });
    assert.deepEqual(fromResponsesInput(JSON.stringify({ input: wire })), [
      { role: "user", content: [{ type: "input_image", image: "data:image/png;base64,iVBORw0KGgo=" }] },
      { role: "user", content: "plain" },
      { type: "reasoning", content: [{ type: "input_text", text: "thinking" }], providerData: { encryptedContent: "enc" } },
    ]);
  });
});
