/**
 * Agent loops against a running ctxwarden server.
 *
 *     CTXWARDEN_TARGET=127.0.0.1:50051 npx tsx examples/agent-loop.ts
 *     ANTHROPIC_API_KEY=... CTXWARDEN_TARGET=127.0.0.1:50051 npx tsx examples/agent-loop.ts
 *
 * `runToolLoop` is a real tool loop against the Anthropic Messages API (or
 * anything that speaks it, set by `baseUrl`): it never converts a message by
 * hand. ctxwarden renders the request body (`buildModelInput` with format
 * ANTHROPIC_MESSAGES), the agent POSTs it, and hands the provider's answer
 * back as returned (`appendModelOutput`: the `message` body, or the events of
 * a streamed call); tool results go in as Anthropic `tool_result` items.
 * Thinking blocks and their signatures travel back to the model untouched.
 *
 * `runExample` needs no LLM key: every answer is scripted. It shows the other
 * calls an agent makes: record tool calls and results with the builders, roll
 * back a failed model call, compact with its own summariser, and build again.
 */
import { pathToFileURL } from "node:url";

import {
  DEFAULT_TARGET,
  InputCache,
  ModelInputFormat,
  RecoveryAction,
  StopReason,
  assistant,
  assistantError,
  createClient,
  durationMs,
  messageText,
  messageToolCalls,
  modelOutputJson,
  toolCall,
  toolDefinition,
  toolResult,
  user,
  type Compaction,
  type ContextServiceClient,
  type Message,
  type ModelInput,
  type RollbackTurnResponse,
  type SummaryPrompt,
} from "../src/index.js";

/** What runExample did, for callers (and tests) to inspect. */
export interface ExampleResult {
  sessionId: string;
  rollback: RollbackTurnResponse;
  compaction: Compaction;
  modelInput: ModelInput;
}

/** Stands in for the agent's own LLM writing a summary from the plan's prompt. */
function standInSummarizer(prompt: SummaryPrompt): string {
  const lines = prompt.user.split("\n").length;
  return [
    "## Goal",
    "Explain what setup.py does and how the demo package is built.",
    "## Progress",
    "### Done",
    "- Read setup.py: it calls setuptools.setup(name='demo').",
    "## Next Steps",
    "1. Answer the follow-up questions.",
    `<!-- stand-in summary of a ${lines}-line prompt, budget ${prompt.maxTokens} tokens -->`,
  ].join("\n");
}

/** The scripted agent loop; `log` receives one line per step. */
export async function runExample(
  client: ContextServiceClient,
  log: (line: string) => void = console.log,
): Promise<ExampleResult> {
  // #region quickstart
  const session = await client.createSession({
    session: {
      systemPrompt: "You are a careful coding agent.",
      tools: [toolDefinition("read", "Read a file", { type: "object" })],
      model: "claude-sonnet-4-5",
      policy: { keepRecentTokens: 60n },
    },
  });
  const sessionId = session.sessionId;
  await client.appendMessages({ sessionId, messages: [user("What does setup.py do?")] });
  let input = await client.buildModelInput({ sessionId });
  log(`session ${sessionId}: ${input.messages.length} message(s), ${input.tokens?.totalTokens} tokens`);

  // The model calls a tool; the agent runs it and records the result.
  await client.appendMessages({
    sessionId,
    messages: [
      assistant("Let me look.", [toolCall("call-1", "read", { path: "setup.py" })]),
      toolResult("call-1", "from setuptools import setup\nsetup(name='demo')", { toolName: "read" }),
    ],
  });

  // The next model call fails: record it, then ask what to do.
  await client.appendMessages({ sessionId, messages: [assistantError("429 rate limit")] });
  const rollback = await client.rollbackTurn({ sessionId });
  log(
    `rollback: action=${RecoveryAction[rollback.action]} retry_after=${durationMs(rollback.retryAfter) / 1000}s ` +
      `rolled_back_seqs=[${rollback.rolledBackSeqs.join(",")}] reason=${JSON.stringify(rollback.reason)}`,
  );
  // #endregion quickstart

  // The retry succeeds, and the conversation goes on for a few turns.
  await client.appendMessages({
    sessionId,
    messages: [assistant("setup.py declares a package named 'demo' with setuptools; nothing else.")],
  });
  const followUps: [string, string][] = [
    ["How do I build it?", "Run `python -m build`; it writes an sdist and a wheel into dist/."],
    ["And install it locally?", "Use `pip install -e .` for an editable install while you work on it."],
    ["Does it have dependencies?", "No: setup() gets no install_requires, so it installs nothing else."],
  ];
  for (const [question, answer] of followUps) {
    const appended = await client.appendMessages({ sessionId, messages: [user(question), assistant(answer)] });
    log(`turn: last_seq=${appended.lastSeq} context_tokens=${appended.contextTokens}`);
  }

  // Agent-side compaction: the server plans the cut and writes the prompts,
  // the agent's own LLM writes the summary, the server stores the checkpoint.
  const plan = await client.prepareCompaction({ sessionId });
  log(
    `plan ${plan.planId}: summarize seqs ${plan.summarizedFromSeq}..${plan.summarizedToSeq}, ` +
      `keep from ${plan.firstKeptSeq}, split_turn=${plan.splitTurn}, tokens_before=${plan.tokensBefore}`,
  );
  if (plan.historyPrompt === undefined) {
    throw new Error("PrepareCompaction returned no history prompt");
  }
  const summary = standInSummarizer(plan.historyPrompt);
  const turnPrefixSummary =
    plan.splitTurn && plan.turnPrefixPrompt !== undefined ? standInSummarizer(plan.turnPrefixPrompt) : "";
  const compaction = await client.commitCompaction({ sessionId, planId: plan.planId, summary, turnPrefixSummary });
  log(
    `compaction ${compaction.compactionId}: ${compaction.tokensBefore} -> ${compaction.tokensAfter} tokens, ` +
      `first_kept_seq=${compaction.firstKeptSeq}, read_files=[${compaction.readFiles.join(",")}]`,
  );

  input = await client.buildModelInput({ sessionId });
  const t = input.tokens;
  log(
    `tokens: system=${t?.systemTokens} tools=${t?.toolsTokens} summary=${t?.summaryTokens} ` +
      `messages=${t?.messageTokens} total=${t?.totalTokens} window=${t?.contextWindow} ` +
      `threshold=${t?.compactionThreshold} estimated=${t?.estimated}`,
  );
  log(`first_kept_seq=${input.firstKeptSeq} last_seq=${input.lastSeq} messages=${input.messages.length}`);
  const first = input.messages[0];
  if (first !== undefined) {
    log(
      `first message: summary=${first.metadata["ctxwarden.summary"] ?? "-"} ` +
        `text=${JSON.stringify(messageText(first).split("\n")[0])}`,
    );
  }
  return { sessionId, rollback, compaction, modelInput: input };
}

/** The model the tool loop calls: a dated snapshot, the ID Anthropic answers with. */
export const TOOL_LOOP_MODEL = "claude-sonnet-4-5-20250929";

export interface ToolLoopOptions {
  /** The Messages API's base URL (default `https://api.anthropic.com`). */
  baseUrl?: string;
  /** Sent as `x-api-key`. */
  apiKey?: string;
  /** The session's model, the one called (default TOOL_LOOP_MODEL). */
  model?: string;
  /** Whether model call `turn` (1, 2, ...) streams; default: every call. */
  stream?: (turn: number) => boolean;
}

/** What runToolLoop did. */
export interface ToolLoopResult {
  sessionId: string;
  /** The model's final answer as ctxwarden stored it. */
  answer: Message;
  /** Model calls made. */
  turns: number;
}

/** Stand-ins for the agent's tools: what each returns for its input. */
const standInTools: Record<string, (input: Record<string, unknown>) => string> = {
  read: (input) => {
    if (input["path"] !== "setup.py") {
      throw new Error(`no such file: ${String(input["path"])}`);
    }
    return "from setuptools import setup\nsetup(name='demo')";
  },
  run: (input) => `$ ${String(input["command"])}\n3 passed in 0.02s`,
};

/** Runs a tool call; a failure becomes an error result the model sees. */
async function runTool(call: { name: string; argumentsJson: string }): Promise<{ content: string; is_error?: true }> {
  try {
    const tool = standInTools[call.name];
    if (tool === undefined) {
      throw new Error(`unknown tool ${call.name}`);
    }
    return { content: tool(JSON.parse(call.argumentsJson) as Record<string, unknown>) };
  } catch (err) {
    return { content: String(err), is_error: true };
  }
}

/**
 * A multi-turn tool loop against the Anthropic Messages API: ask, run the
 * tools the model calls, repeat until it answers. Only JSON moves between
 * ctxwarden and the provider; nothing is converted by hand.
 */
export async function runToolLoop(client: ContextServiceClient, opts: ToolLoopOptions = {}): Promise<ToolLoopResult> {
  const { baseUrl = "https://api.anthropic.com", apiKey = "", model: sessionModel = TOOL_LOOP_MODEL } = opts;
  const { stream = () => true } = opts;
  const session = await client.createSession({
    session: {
      systemPrompt: "You are a careful coding agent. Use the tools; answer in one sentence.",
      tools: [
        toolDefinition("read", "Read a file of the repository", {
          type: "object",
          properties: { path: { type: "string" } },
          required: ["path"],
        }),
        toolDefinition("run", "Run a shell command in the repository", {
          type: "object",
          properties: { command: { type: "string" }, timeout_s: { type: "integer" } },
          required: ["command"],
        }),
      ],
      model: sessionModel,
    },
  });
  const sessionId = session.sessionId;
  const model = session.model;
  const format = ModelInputFormat.ANTHROPIC_MESSAGES;
  const headers = { "content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": apiKey };
  const params = { model, max_tokens: 8192, thinking: { type: "enabled", budget_tokens: 2048 } };
  const question = [{ role: "user", content: "What does setup.py do, and do the tests pass?" }];
  await client.appendModelOutput({ sessionId, format, output: { case: "itemsJson", value: JSON.stringify(question) } });

  // #region tool-loop
  const inputs = new InputCache(client); // each input resumes the last: only what is new crosses the wire
  for (let turn = 1; ; turn++) {
    const input = await inputs.build({ sessionId, format });
    const body = JSON.stringify({ ...params, stream: stream(turn), ...JSON.parse(input.renderedJson) });
    const response = await fetch(`${baseUrl}/v1/messages`, { method: "POST", headers, body });
    const output = { case: "responseJson", value: await modelOutputJson(response) } as const;
    const answer = (await client.appendModelOutput({ sessionId, format, output })).messages[0]!;
    if (answer.stopReason !== StopReason.TOOL_USE) {
      return { sessionId, answer, turns: turn };
    }
    const content = await Promise.all(
      messageToolCalls(answer).map(async (c) => ({ type: "tool_result", tool_use_id: c.id, ...(await runTool(c)) })),
    );
    const value = JSON.stringify([{ role: "user", content }]);
    await client.appendModelOutput({ sessionId, format, output: { case: "itemsJson", value } });
  }
  // #endregion tool-loop
}

// Run directly: `npx tsx examples/agent-loop.ts`.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = createClient(process.env["CTXWARDEN_TARGET"] ?? DEFAULT_TARGET);
  try {
    await runExample(client);
    const apiKey = process.env["ANTHROPIC_API_KEY"];
    if (apiKey !== undefined && apiKey !== "") {
      const { answer, turns } = await runToolLoop(client, { apiKey });
      console.log(`answer after ${turns} model calls: ${messageText(answer)}`);
    }
  } finally {
    client.close();
  }
}
