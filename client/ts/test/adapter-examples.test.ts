// The README's adapter examples (examples/openai-agents.ts, examples/ai-sdk.ts)
// run against a real ctxwarden server with the frameworks' own test models,
// and the README shows them verbatim.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { setTracingDisabled } from "@openai/agents-core";
import { ScriptedModel, assistantMessage } from "./scripted-model.js";
import { MockLanguageModelV3 } from "ai/test";

import { Role, createClient, type CtxwardenClient } from "../src/index.js";
import { aiSdkExample } from "../examples/ai-sdk.js";
import { agentsExample } from "../examples/openai-agents.js";
import { startServer, type RunningServer } from "./server.js";

/** The region `name` of an example, dedented by its two-space indentation. */
function region(file: string, name: string): string {
  const source = readFileSync(new URL(`../examples/${file}`, import.meta.url), "utf8");
  const match = new RegExp(`// #region ${name}\\n([\\s\\S]*?)\\n\\s*// #endregion ${name}`).exec(source);
  assert.ok(match !== null, `no region ${name} in examples/${file}`);
  return match[1]!
    .split("\n")
    .map((line) => line.replace(/^ {2}/, ""))
    .join("\n");
}

test("the README shows the adapter examples verbatim, ten lines or so each", () => {
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  for (const [file, name] of [
    ["openai-agents.ts", "readme-openai-agents"],
    ["ai-sdk.ts", "readme-ai-sdk"],
  ] as const) {
    const excerpt = region(file, name);
    assert.ok(readme.includes(excerpt), `README.md's ${name} example differs from examples/${file}`);
    assert.ok(excerpt.split("\n").length <= 12, `${name} is longer than ten lines or so`);
  }
});

describe("the adapter examples against a real ctxwarden server", () => {
  let server: RunningServer;
  let client: CtxwardenClient;

  before(async () => {
    setTracingDisabled(true);
    server = await startServer();
    client = createClient(server.target);
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("openai-agents: the second run sees the first; the items are the stored conversation", async () => {
    const model = new ScriptedModel([[assistantMessage("Sorry about that.")], [assistantMessage("Order 1234.")]]);
    const { answer, items } = await agentsExample(client, model);
    assert.equal(answer, "Order 1234.");
    model.assertComplete();
    assert.ok(JSON.stringify(model.lastCall!.request.input).includes("My order 1234 has not arrived."));
    assert.equal(items.length, 4);
    const { messages } = await client.listMessages({ sessionId: "support-chat-42" });
    assert.deepEqual(
      messages.map((m) => m.role),
      [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT],
    );
  });

  test("ai-sdk: the tool loop is persisted step by step, the second call sees it", async () => {
    const usage = {
      inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 5, text: 5, reasoning: 0 },
    };
    const model = new MockLanguageModelV3({
      doGenerate: [
        {
          content: [{ type: "tool-call", toolCallId: "c1", toolName: "read", input: '{"path":"a.txt"}' }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        },
        { content: [{ type: "text", text: "It has contents." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
        { content: [{ type: "text", text: "contents of a.txt" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
      ],
    });
    assert.equal(await aiSdkExample(client, model), "contents of a.txt");
    const prompt = JSON.stringify(model.doGenerateCalls.at(-1)!.prompt);
    for (const expected of ["You read files.", "Read a.txt", "contents of a.txt", "It has contents.", "What did a.txt say?"]) {
      assert.ok(prompt.includes(expected), `the last prompt lacks ${expected}`);
    }
  });
});
