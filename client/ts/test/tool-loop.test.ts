// End to end: the example's tool loop (examples/agent-loop.ts runToolLoop)
// between a real ctxwarden server and a fake Anthropic Messages API that
// speaks the real wire format (test/fake-anthropic.ts). Turn 1 is a plain
// `message`, turns 2 and 3 are streamed; the provider must receive, every
// turn, the whole conversation as Anthropic expects it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { TOOL_LOOP_MODEL, runToolLoop } from "../examples/agent-loop.js";
import {
  ModelInputFormat,
  ProviderResponseError,
  RecoveryAction,
  Role,
  StopReason,
  createClient,
  durationMs,
  messageText,
  messageToolCalls,
  modelOutputJson,
  type CtxwardenClient,
} from "../src/index.js";
import { THINKING, TOOL_USE_IDS, TURN_USAGE, startFakeAnthropic, type FakeAnthropic } from "./fake-anthropic.js";
import { startServer, type RunningServer } from "./server.js";

const SYSTEM = "You are a careful coding agent. Use the tools; answer in one sentence.";
const QUESTION = "What does setup.py do, and do the tests pass?";
const SETUP_PY = "from setuptools import setup\nsetup(name='demo')";
const PYTEST = "$ pytest -q\n3 passed in 0.02s";
const ANSWER = `setup.py declares one package — 'demo' ("setup(name='demo')"), and the tests pass: ${PYTEST}.`;
const CACHE = { type: "ephemeral" };

type Block = Record<string, unknown>;

/** What Anthropic must receive as `messages` before model call `turn` (1, 2, 3). */
function expectedMessages(fake: FakeAnthropic, turn: number): { role: string; content: Block[] }[] {
  const thinking = (i: number): Block => ({ type: "thinking", thinking: THINKING[i], signature: fake.signature(THINKING[i]!) });
  const result = (i: number, text: string): Block => ({
    type: "tool_result",
    tool_use_id: TOOL_USE_IDS[i],
    content: [{ type: "text", text }],
    is_error: false,
  });
  const all = [
    { role: "user", content: [{ type: "text", text: QUESTION }] },
    {
      role: "assistant",
      content: [thinking(0), { type: "tool_use", id: TOOL_USE_IDS[0], name: "read", input: { path: "setup.py" } }],
    },
    { role: "user", content: [result(0, SETUP_PY)] },
    {
      role: "assistant",
      content: [
        thinking(1),
        { type: "tool_use", id: TOOL_USE_IDS[1], name: "run", input: { command: "pytest -q", timeout_s: 120 } },
      ],
    },
    { role: "user", content: [result(1, PYTEST)] },
  ];
  const messages = structuredClone(all.slice(0, 2 * turn - 1));
  // The prompt-cache breakpoint: the last block of the last user message.
  const last = messages[messages.length - 1]!.content;
  last[last.length - 1]!["cache_control"] = CACHE;
  return messages;
}

const EXPECTED_TOOLS = [
  {
    name: "read",
    description: "Read a file of the repository",
    input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  },
  {
    name: "run",
    description: "Run a shell command in the repository",
    input_schema: {
      type: "object",
      properties: { command: { type: "string" }, timeout_s: { type: "integer" } },
      required: ["command"],
    },
    cache_control: CACHE,
  },
];

describe("the tool loop against a fake Anthropic Messages API", () => {
  let server: RunningServer;
  let client: CtxwardenClient;
  let fake: FakeAnthropic;

  before(async () => {
    server = await startServer();
    client = createClient(server.target);
    fake = await startFakeAnthropic();
  });

  after(async () => {
    client?.close();
    await fake?.close();
    await server?.stop();
  });

  test("runToolLoop: three model calls (one plain, two streamed), thinking and tool calls sent back exactly", async () => {
    const start = fake.requests.length;
    const result = await runToolLoop(client, { baseUrl: fake.baseUrl, apiKey: "sk-ant-test", stream: (turn) => turn > 1 });
    assert.equal(result.turns, 3);
    assert.equal(messageText(result.answer), ANSWER);

    // What the provider received, turn by turn.
    const requests = fake.requests.slice(start);
    assert.equal(requests.length, 3);
    for (const [i, req] of requests.entries()) {
      const turn = i + 1;
      assert.equal(req.status, 200, `turn ${turn} was refused`);
      assert.equal(req.headers["anthropic-version"], "2023-06-01");
      assert.equal(req.headers["x-api-key"], "sk-ant-test");
      assert.match(String(req.headers["content-type"]), /^application\/json/);
      assert.deepEqual(req.body, {
        model: TOOL_LOOP_MODEL,
        max_tokens: 8192,
        thinking: { type: "enabled", budget_tokens: 2048 },
        stream: turn > 1,
        system: [{ type: "text", text: SYSTEM, cache_control: CACHE }],
        messages: expectedMessages(fake, turn),
        tools: EXPECTED_TOOLS,
      });
    }
    // The signatures are the provider's own, byte for byte (it checks them too).
    const sent = requests[2]!.body["messages"] as { content: Block[] }[];
    assert.equal(sent[1]!.content[0]!["signature"], fake.signature(THINKING[0]!));
    assert.equal(sent[3]!.content[0]!["signature"], fake.signature(THINKING[1]!));

    // The agent posted ctxwarden's rendering untouched: each body is its own
    // parameters plus what BuildModelInput returned then (replayed with as_of_seq).
    const format = ModelInputFormat.ANTHROPIC_MESSAGES;
    for (const [i, asOfSeq] of [2n, 4n, 6n].entries()) {
      const replayed = await client.buildModelInput({ sessionId: result.sessionId, format, asOfSeq });
      const { model, max_tokens, thinking, stream, ...rendered } = requests[i]!.body;
      assert.deepEqual({ model, max_tokens, thinking, stream }, {
        model: TOOL_LOOP_MODEL,
        max_tokens: 8192,
        thinking: { type: "enabled", budget_tokens: 2048 },
        stream: i > 0,
      });
      assert.deepEqual(rendered, JSON.parse(replayed.renderedJson));
      assert.deepEqual(replayed.notices, [], `turn ${i + 1}: rendering notices`);
    }

    // What ctxwarden stored: roles, stop reasons, usage, model, tool calls.
    const { messages } = await client.listMessages({ sessionId: result.sessionId });
    assert.deepEqual(
      messages.map((m) => [m.seq, Role[m.role], StopReason[m.stopReason]]),
      [
        [1n, "USER", "UNSPECIFIED"],
        [2n, "ASSISTANT", "TOOL_USE"],
        [3n, "TOOL_RESULT", "UNSPECIFIED"],
        [4n, "ASSISTANT", "TOOL_USE"],
        [5n, "TOOL_RESULT", "UNSPECIFIED"],
        [6n, "ASSISTANT", "STOP"],
      ],
    );
    const answers = messages.filter((m) => m.role === Role.ASSISTANT);
    assert.deepEqual(
      answers.map((m) => ({
        input: m.usage?.inputTokens,
        output: m.usage?.outputTokens,
        cacheRead: m.usage?.cacheReadTokens,
        cacheWrite: m.usage?.cacheWriteTokens,
      })),
      TURN_USAGE.map((u) => ({
        input: BigInt(u.input_tokens),
        output: BigInt(u.output_tokens),
        cacheRead: BigInt(u.cache_read_input_tokens),
        cacheWrite: BigInt(u.cache_creation_input_tokens),
      })),
    );
    for (const m of answers) {
      assert.equal(m.model, TOOL_LOOP_MODEL);
      assert.equal(m.provider, "anthropic");
    }
    assert.deepEqual(
      answers.map((m) => m.content.map((b) => b.block.case)),
      [["thinking", "toolCall"], ["thinking", "toolCall"], ["text"]],
    );
    // The streamed thinking and signature, and the input_json_delta pieces, assembled.
    const streamed = answers[1]!;
    const block = streamed.content[0]!.block;
    assert.ok(block.case === "thinking");
    assert.equal(block.value.thinking, THINKING[1]);
    assert.equal(block.value.signature, fake.signature(THINKING[1]!));
    assert.deepEqual(
      messageToolCalls(streamed).map((c) => [c.id, c.name, JSON.parse(c.argumentsJson)]),
      [[TOOL_USE_IDS[1], "run", { command: "pytest -q", timeout_s: 120 }]],
    );
    const results = messages.filter((m) => m.role === Role.TOOL_RESULT);
    assert.deepEqual(
      results.map((m) => [m.toolCallId, messageText(m), m.isError]),
      [
        [TOOL_USE_IDS[0], SETUP_PY, false],
        [TOOL_USE_IDS[1], PYTEST, false],
      ],
    );
  });

  test("with an alias as the session model, thinking still goes back to the model", async () => {
    // Anthropic answers an alias with the dated snapshot; the server treats them as one model.
    const start = fake.requests.length;
    await runToolLoop(client, { baseUrl: fake.baseUrl, model: "claude-sonnet-4-5" });
    assert.deepEqual(fake.requests.slice(start).map((r) => r.status), [200, 200, 200]);
  });

  test("a provider error: modelOutputJson rejects with the ProviderError RollbackTurn classifies", async () => {
    fake.failNext(529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }, { "retry-after": "7" });
    const { sessionId } = await client.createSession({ session: { model: TOOL_LOOP_MODEL } });
    const response = await fetch(`${fake.baseUrl}/v1/messages`, { method: "POST", body: "{}" });
    const err = await modelOutputJson(response).then(
      () => assert.fail("modelOutputJson accepted HTTP 529"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ProviderResponseError, String(err));
    assert.equal(err.status, 529);
    assert.equal(err.providerError.headers["retry-after"], "7");
    assert.match(err.providerError.body, /overloaded_error/);
    const rollback = await client.rollbackTurn({ sessionId, providerError: err.providerError });
    assert.equal(rollback.action, RecoveryAction.RETRY);
    assert.equal(durationMs(rollback.retryAfter), 7000, rollback.reason);
  });
});

test("the example's tool loop converts nothing by hand", () => {
  const example = readFileSync(new URL("../examples/agent-loop.ts", import.meta.url), "utf8");
  const region = /\/\/ #region tool-loop\n([\s\S]*?)\n\s*\/\/ #endregion tool-loop/.exec(example)?.[1];
  assert.ok(region !== undefined, "no tool-loop region in the example");
  const code = region.replace(/\/\/.*$/gm, "");
  // Its only ctxwarden calls move provider JSON in and out.
  assert.deepEqual(new Set(code.match(/client\.\w+/g)), new Set(["client.appendModelOutput"]));
  assert.match(code, /new InputCache\(client\)/);
  assert.match(code, /inputs\.build\(\{ sessionId, format \}\)/);
  // The rendered body is posted as it is, merged with the agent's own parameters.
  assert.deepEqual(code.match(/\w*renderedJson\)?/g), ["renderedJson)"]);
  assert.match(code, /\.\.\.JSON\.parse\(input\.renderedJson\)/);
  // The answer goes back as returned; ctxwarden assembles streams.
  assert.match(code, /modelOutputJson\(response\)/);
  // No message builders, no provider content or event types but the tool result the agent writes.
  for (const word of [
    "appendMessages", "user(", "assistant(", "toolCall(", "toolResult(", "create(", "Schema",
    "thinking", "signature", "tool_use\"", "\"text\"", "content_block", "delta", "event", "data:",
    "getReader", "split(", ".messages.", "stop_reason", "role: \"assistant\"",
  ]) {
    assert.ok(!code.includes(word), `the tool loop contains ${JSON.stringify(word)}`);
  }
});

test("README's tool loop is an excerpt of examples/agent-loop.ts", () => {
  const example = readFileSync(new URL("../examples/agent-loop.ts", import.meta.url), "utf8");
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const region = /\/\/ #region tool-loop\n([\s\S]*?)\n\s*\/\/ #endregion tool-loop/.exec(example)?.[1];
  assert.ok(region !== undefined);
  const dedented = region
    .split("\n")
    .map((line) => line.replace(/^ {2}/, ""))
    .join("\n");
  assert.ok(readme.includes(dedented), "README.md's tool loop differs from the example's tool-loop region");
});
