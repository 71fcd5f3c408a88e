// The AI SDK helpers against a real ctxwarden server: ModelMessage <->
// ctxwarden Message conversion part by part, and generateText with the
// ctxwardenSteps prepareStep/onStepFinish pair and the SDK's mock model.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { generateText, stepCountIs, tool, type ModelMessage } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { ListMessagesRequestSchema, MessageVisibility, Role, createClient, messageText, user, type CtxwardenClient } from "../src/index.js";
import { ctxwardenSteps, fromCtxwardenMessages, historyOnly, toCtxwardenMessages } from "../src/ai-sdk.js";
import { startServer, type RunningServer } from "./server.js";

/** One scripted answer of the mock model (what its doGenerate returns). */
type GenerateResult = Exclude<
  NonNullable<NonNullable<ConstructorParameters<typeof MockLanguageModelV3>[0]>["doGenerate"]>,
  ((...args: never[]) => unknown) | unknown[]
>;

const usage = (input: number, output: number): GenerateResult["usage"] => ({
  inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: output, text: output, reasoning: 0 },
});

function answer(content: GenerateResult["content"], finish: "stop" | "tool-calls"): GenerateResult {
  return { content, finishReason: { unified: finish, raw: finish }, usage: usage(100, 20), warnings: [] };
}

const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 1, 2, 3]);

// Every part kind a stored history can hold, in the shapes fromCtxwardenMessages returns.
const history: ModelMessage[] = [
  {
    role: "user",
    content: [
      { type: "text", text: "What is in this picture and in notes.pdf? ça va 🙂" },
      { type: "image", image: png, mediaType: "image/png" },
      { type: "file", data: new Uint8Array([37, 80, 68, 70]), mediaType: "application/pdf", filename: "notes.pdf" },
    ],
  },
  {
    role: "assistant",
    content: [
      { type: "reasoning", text: "I should look at the file.", providerOptions: { anthropic: { signature: "sig-1" } } },
      { type: "text", text: "Let me read it." },
      { type: "tool-call", toolCallId: "call-1", toolName: "read", input: { path: "notes.pdf" } },
      { type: "tool-call", toolCallId: "call-2", toolName: "stat", input: { path: "notes.pdf" } },
    ],
  },
  {
    role: "tool",
    content: [
      { type: "tool-result", toolCallId: "call-1", toolName: "read", output: { type: "text", value: "hello" } },
      { type: "tool-result", toolCallId: "call-2", toolName: "stat", output: { type: "json", value: { size: 4, ok: true } } },
    ],
  },
  {
    role: "assistant",
    content: [
      { type: "tool-call", toolCallId: "call-3", toolName: "read", input: { path: "missing" } },
    ],
  },
  {
    role: "tool",
    content: [
      { type: "tool-result", toolCallId: "call-3", toolName: "read", output: { type: "error-text", value: "no such file" } },
    ],
  },
  { role: "assistant", content: [{ type: "text", text: "A PNG, and notes.pdf says hello." }] },
];

describe("AI SDK helpers against a real ctxwarden server", () => {
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

  test("ModelMessages are stored as ctxwarden messages and read back unchanged", async () => {
    const { sessionId } = await client.createSession({ session: { systemPrompt: "You look at files." } });
    const messages = toCtxwardenMessages(history);
    assert.deepEqual(
      messages.map((m) => m.role),
      [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT, Role.TOOL_RESULT, Role.ASSISTANT, Role.TOOL_RESULT, Role.ASSISTANT],
    );
    assert.deepEqual(
      messages[0]!.content.map((b) => b.block.case),
      ["text", "image", "image"],
    );
    assert.deepEqual(
      messages[1]!.content.map((b) => b.block.case),
      ["thinking", "text", "toolCall", "toolCall"],
    );
    assert.equal(messages[5]!.isError, true);
    await client.appendMessages({ sessionId, messages });

    const listed = await client.listMessages({ sessionId });
    assert.deepEqual(fromCtxwardenMessages(listed.messages), history);
    assert.equal(messageText(listed.messages[2]!), "hello");
    assert.equal(messageText(listed.messages[3]!), '{"size":4,"ok":true}');

    // The model input (native, view FULL) converts back the same way.
    const input = await client.buildModelInput({ sessionId });
    assert.deepEqual(fromCtxwardenMessages(input.messages), history);
  });

  test("strings and system messages", () => {
    assert.deepEqual(fromCtxwardenMessages(toCtxwardenMessages([{ role: "user", content: "hi" }])), [
      { role: "user", content: [{ type: "text", text: "hi" }] },
    ]);
    assert.throws(() => toCtxwardenMessages([{ role: "system", content: "be nice" }]), /system prompt is the session's/);
    assert.throws(
      () => toCtxwardenMessages([{ role: "user", content: [{ type: "image", image: new URL("https://example.invalid/a.png") }] }]),
      /https: URL cannot be stored/,
    );
    assert.throws(
      () => toCtxwardenMessages([{ role: "user", content: [{ type: "image", image: "https://example.invalid/a.png" }] }]),
      /https: URL cannot be stored/,
    );
  });

  test("tool results with files: ai 6's image-data / file-data parts, and ai 7's file parts", async () => {
    const { sessionId } = await client.createSession({ session: { systemPrompt: "You take screenshots." } });
    const pdf = new Uint8Array([37, 80, 68, 70]);
    const base64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64");
    // The shapes fromCtxwardenMessages returns: accepted by ai 6, and by ai 7 (deprecated there).
    const messages: ModelMessage[] = [
      { role: "user", content: [{ type: "text", text: "Take a screenshot." }] },
      { role: "assistant", content: [{ type: "tool-call", toolCallId: "call-1", toolName: "shot", input: {} }] },
      {
        role: "tool",
        content: [
          {
            type: "tool-result",
            toolCallId: "call-1",
            toolName: "shot",
            output: {
              type: "content",
              value: [
                { type: "text", text: "a screenshot and its notes" },
                { type: "image-data", data: base64(png), mediaType: "image/png" },
                { type: "file-data", data: base64(pdf), mediaType: "application/pdf", filename: "notes.pdf" },
              ],
            },
          },
        ],
      },
    ];
    const stored = toCtxwardenMessages(messages);
    assert.deepEqual(
      stored[2]!.content.map((b) => b.block.case),
      ["text", "image", "image"],
    );
    await client.appendMessages({ sessionId, messages: stored });
    const listed = await client.listMessages({ sessionId });
    assert.deepEqual(fromCtxwardenMessages(listed.messages), messages);
    assert.deepEqual(listed.messages[2]!.content[2]!.block.value, { $typeName: "ctxwarden.v1.ImageContent", mimeType: "application/pdf", data: pdf });

    // ai 7's file part (tagged data) becomes the same stored message.
    const ai7Result = {
      type: "tool-result",
      toolCallId: "call-1",
      toolName: "shot",
      output: {
        type: "content",
        value: [
          { type: "text", text: "a screenshot and its notes" },
          { type: "file", data: { type: "data", data: png }, mediaType: "image/png" },
          { type: "file", data: { type: "data", data: base64(pdf) }, mediaType: "application/pdf", filename: "notes.pdf" },
        ],
      },
    };
    assert.deepEqual(toCtxwardenMessages([{ role: "tool", content: [ai7Result] } as unknown as ModelMessage]), [stored[2]]);
  });

  test("generateText with ctxwardenSteps: the steps are persisted, the next call gets the stored context", async () => {
    const { sessionId } = await client.createSession({ session: { systemPrompt: "You read files." } });
    const model = new MockLanguageModelV3({
      doGenerate: [
        answer([{ type: "tool-call", toolCallId: "call-1", toolName: "read", input: '{"path":"a.txt"}' }], "tool-calls"),
        answer([{ type: "text", text: "a.txt says hello." }], "stop"),
        answer([{ type: "text", text: "You asked about a.txt." }], "stop"),
      ],
    });
    const tools = {
      read: tool({
        description: "Read a file",
        inputSchema: z.object({ path: z.string() }),
        execute: async ({ path }: { path: string }) => `hello from ${path}`,
      }),
    };
    const steps = ctxwardenSteps(client, { sessionId });
    const first = await generateText({
      model,
      tools,
      stopWhen: stepCountIs(5),
      messages: [{ role: "user", content: "What is in a.txt?" }],
      ...steps,
    });
    assert.equal(first.text, "a.txt says hello.");
    const second = await generateText({ model, tools, messages: [{ role: "user", content: "What did I ask?" }], ...steps });
    assert.equal(second.text, "You asked about a.txt.");

    // Stored: the turns of both calls, with usage and model on the answers.
    const { messages } = await client.listMessages({ sessionId });
    assert.deepEqual(
      messages.map((m) => m.role),
      [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT, Role.ASSISTANT, Role.USER, Role.ASSISTANT],
    );
    assert.equal(messageText(messages[2]!), "hello from a.txt");
    assert.equal(messages[1]!.usage?.inputTokens, 100n);
    assert.equal(messages[1]!.model, model.modelId);

    // The last model call was given the session's system prompt and the whole stored history.
    const prompt = model.doGenerateCalls.at(-1)!.prompt;
    assert.deepEqual(prompt[0], { role: "system", content: "You read files." });
    const texts = JSON.stringify(prompt);
    for (const expected of ["What is in a.txt?", "hello from a.txt", "a.txt says hello.", "What did I ask?"]) {
      assert.ok(texts.includes(expected), `the last prompt lacks ${expected}: ${texts}`);
    }
    assert.equal(prompt.filter((m) => m.role === "user").length, 2);
  });

  test("a HISTORY_ONLY message is stored and listed, never sent to the model", async () => {
    const { sessionId } = await client.createSession({ session: { systemPrompt: "Be brief." } });
    await client.appendMessages({ sessionId, messages: [user("hello"), historyOnly(user("(the user opened the settings page)"))] });
    const listed = await client.listMessages({ sessionId });
    assert.equal(listed.messages.length, 2);
    assert.equal(listed.messages[1]!.visibility, MessageVisibility.HISTORY_ONLY);
    const { prepareStep } = ctxwardenSteps(client, { sessionId });
    const { messages } = await prepareStep({ stepNumber: 1, messages: [] });
    assert.deepEqual(messages, [{ role: "user", content: [{ type: "text", text: "hello" }] }]);
    // Newest first: the tail of the history, as a UI would load it.
    const newest = await client.listMessages({ sessionId, newestFirst: true, pageSize: 1 });
    assert.equal(messageText(newest.messages[0]!), "(the user opened the settings page)");
    assert.ok(ListMessagesRequestSchema.field["newestFirst"] !== undefined);
  });
});
