/**
 * A minimal agent loop against a running ctxwarden server.
 *
 *     CTXWARDEN_TARGET=127.0.0.1:50051 npx tsx examples/agent-loop.ts
 *
 * The "model" is a stand-in: every answer is scripted, so the example runs
 * without LLM keys. It shows the calls an agent makes: create a session,
 * append, build the model input, record tool calls and results, roll back a
 * failed model call, compact with its own summariser, and build again.
 */
import { pathToFileURL } from "node:url";

import {
  DEFAULT_TARGET,
  RecoveryAction,
  assistant,
  assistantError,
  createClient,
  durationMs,
  messageText,
  toolCall,
  toolDefinition,
  toolResult,
  user,
  type Compaction,
  type ContextServiceClient,
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

// Run directly: `npx tsx examples/agent-loop.ts`.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = createClient(process.env["CTXWARDEN_TARGET"] ?? DEFAULT_TARGET);
  try {
    await runExample(client);
  } finally {
    client.close();
  }
}
