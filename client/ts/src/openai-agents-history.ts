/**
 * The history changes of `@openai/agents-core` 0.20's optional session API,
 * done on ctxwarden without deleting history (see `CtxwardenSession`):
 *
 * - `replaceHistoryWithCompaction(items)`: the items (a provider `compaction`
 *   item and what follows it) are appended, then a ctxwarden checkpoint
 *   (PrepareCompaction + CommitCompaction, the agent-side compaction) starts
 *   the effective context at them. Everything before stays in the history
 *   (ListMessages) and in ListCompactions.
 * - `applyHistoryTransaction`: `append_items` is one AppendModelOutput whose
 *   request_id comes from the operation ID, so a retry is answered from the
 *   server's request log and a different transaction under the same ID is
 *   refused (REQUEST_ID_REUSED). `replace_suffix` checks the suffix, rolls it
 *   back (RollbackTurn with expected_last_seq: rolled-back messages stay in
 *   the history) and appends the replacement, both with request IDs from the
 *   operation ID: a retry after a failure between the two finishes it.
 *
 * The types are declared here, structurally, so this module compiles against
 * every `@openai/agents-core` the peer range admits (0.14 has no such API).
 */
import { createHash } from "node:crypto";

import type { AgentInputItem } from "@openai/agents-core";
import { Code, ConnectError, type CallOptions, type Client } from "@connectrpc/connect";

import { ModelInputFormat, ModelInputView, type ContextService } from "./gen/ctxwarden/v1/context_service_pb.js";
import { MessageView } from "./gen/ctxwarden/v1/context_service_pb.js";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** `SessionHistoryTransaction` of `@openai/agents-core` 0.20. */
export type HistoryTransaction =
  | { type: "append_items"; items: AgentInputItem[] }
  | { type: "replace_suffix"; expectedSuffix: AgentInputItem[]; replacement: AgentInputItem[] };

/** `SessionHistoryTransactionArgs` of `@openai/agents-core` 0.20. */
export interface HistoryTransactionArgs {
  /** Stable across retries of the same transaction. */
  operationId: string;
  transaction: HistoryTransaction;
}

/** The checkpoint summary in front of a provider compaction item. */
export const PROVIDER_COMPACTION_SUMMARY =
  "The conversation before this point was compacted by the model provider; the compaction item that follows carries it.";

/** The checkpoint's turn-prefix summary when the compaction item falls inside a turn. */
export const PROVIDER_COMPACTION_TURN_PREFIX = "The start of this turn is carried by the same compaction item.";

/** The ContextService methods the history changes call. */
export type HistoryClient = Pick<
  Client<typeof ContextService>,
  "appendModelOutput" | "buildModelInput" | "commitCompaction" | "getSession" | "listMessages" | "prepareCompaction" | "rollbackTurn"
>;

/** What the history changes need of the session that runs them. */
export interface HistoryContext {
  client: HistoryClient;
  sessionId: string;
  callOptions: CallOptions | undefined;
  /** The session's current items (its effective context). */
  items(): Promise<AgentInputItem[]>;
  /** Items as stored items compare (what a round trip through ctxwarden keeps). */
  comparable(items: AgentInputItem[]): AgentInputItem[];
  /** The wire form of an item (AppendModelOutput items_json). */
  toWire(item: AgentInputItem): Record<string, unknown>;
  /** Items from a rendered OPENAI_RESPONSES input. */
  fromRendered(renderedJson: string): AgentInputItem[];
}

/** The request_id of an operation: 1-128 printable ASCII characters, whatever the operation ID is. */
export function operationRequestId(operationId: string, step = ""): string {
  const digest = createHash("sha256").update(operationId).digest("hex").slice(0, 48);
  return `oa-tx-${digest}${step}`;
}

function precondition(message: string): ConnectError {
  return new ConnectError(message, Code.FailedPrecondition);
}

function sameItems(ctx: HistoryContext, a: AgentInputItem[], b: AgentInputItem[]): boolean {
  return JSON.stringify(ctx.comparable(a)) === JSON.stringify(ctx.comparable(b));
}

async function append(ctx: HistoryContext, items: AgentInputItem[], requestId: string) {
  return await ctx.client.appendModelOutput(
    {
      sessionId: ctx.sessionId,
      format: ModelInputFormat.OPENAI_RESPONSES,
      output: { case: "itemsJson", value: JSON.stringify(items.map(ctx.toWire)) },
      requestId,
      view: MessageView.BASIC,
    },
    ctx.callOptions,
  );
}

/**
 * Appends `items` (a `compaction` item first) and starts the effective context
 * at them with a checkpoint; the older history stays, summarised by a line
 * that says the compaction item carries it.
 */
export async function replaceWithCompaction(ctx: HistoryContext, items: AgentInputItem[]): Promise<void> {
  const first = items[0] as { type?: unknown } | undefined;
  if (first?.type !== "compaction") {
    throw new ConnectError("replaceHistoryWithCompaction: the first item must be a compaction item", Code.InvalidArgument);
  }
  const appended = await ctx.client.appendModelOutput(
    {
      sessionId: ctx.sessionId,
      format: ModelInputFormat.OPENAI_RESPONSES,
      output: { case: "itemsJson", value: JSON.stringify(items.map(ctx.toWire)) },
      view: MessageView.BASIC,
    },
    ctx.callOptions,
  );
  const kept = appended.messages[0];
  if (kept === undefined) {
    return;
  }
  // The cut walks back from the newest message until it has this many tokens:
  // exactly the messages just appended.
  const keep = appended.messages.reduce((sum, m) => sum + m.tokenCount, 0n);
  await checkpointAt(ctx, kept.seq, keep > 0n ? keep : 1n);
}

async function checkpointAt(ctx: HistoryContext, firstKeptSeq: bigint, keepRecentTokens: bigint): Promise<void> {
  let plan;
  try {
    plan = await ctx.client.prepareCompaction({ sessionId: ctx.sessionId, keepRecentTokens }, ctx.callOptions);
  } catch (err) {
    // Nothing before the compaction item (a new session): no checkpoint needed.
    if (err instanceof ConnectError && err.findDetails(ErrorInfoSchema)[0]?.reason === "NOTHING_TO_COMPACT") {
      return;
    }
    throw err;
  }
  if (plan.firstKeptSeq !== firstKeptSeq) {
    // Someone appended meanwhile: the plan would summarise the compaction item away.
    throw new ConnectError(
      `replaceHistoryWithCompaction: the session changed while it was compacted (the cut fell at seq ` +
        `${plan.firstKeptSeq}, not ${firstKeptSeq}); the compaction item stays in the history`,
      Code.Aborted,
    );
  }
  await ctx.client.commitCompaction(
    {
      sessionId: ctx.sessionId,
      planId: plan.planId,
      summary: PROVIDER_COMPACTION_SUMMARY,
      turnPrefixSummary: plan.splitTurn ? PROVIDER_COMPACTION_TURN_PREFIX : "",
    },
    ctx.callOptions,
  );
}

/** Applies a 0.20 history transaction (see the module's comment). */
export async function applyTransaction(ctx: HistoryContext, args: HistoryTransactionArgs): Promise<void> {
  const { operationId, transaction } = args;
  if (typeof operationId !== "string" || operationId.trim() === "") {
    throw new ConnectError("applyHistoryTransaction: operationId must be a non-empty string", Code.InvalidArgument);
  }
  const requestId = operationRequestId(operationId);
  switch (transaction.type) {
    case "append_items":
      if (transaction.items.length > 0) {
        await append(ctx, transaction.items, requestId);
      }
      return;
    case "replace_suffix":
      await replaceSuffix(ctx, transaction.expectedSuffix, transaction.replacement, requestId);
      return;
    default:
      throw new ConnectError(
        `applyHistoryTransaction: unsupported transaction type ${JSON.stringify((transaction as { type?: unknown }).type)}`,
        Code.InvalidArgument,
      );
  }
}

async function replaceSuffix(
  ctx: HistoryContext,
  expected: AgentInputItem[],
  replacement: AgentInputItem[],
  requestId: string,
): Promise<void> {
  const { lastSeq } = await ctx.client.getSession({ sessionId: ctx.sessionId }, ctx.callOptions);
  const items = await ctx.items();
  const start = items.length - expected.length;
  if (expected.length === 0 || start < 0 || !sameItems(ctx, items.slice(start), expected)) {
    if (replacement.length > 0 && items.length >= replacement.length && sameItems(ctx, items.slice(-replacement.length), replacement)) {
      return; // A retry of a transaction that was applied: the session already ends with the replacement.
    }
    await resumeReplacement(ctx, replacement, requestId, lastSeq);
    return;
  }
  const toSeq = await seqBefore(ctx, items.slice(0, start));
  // RollbackTurn leaves last_seq as it was, and toSeq is then the newest
  // active seq: a retry can rebuild this exact request (resumeReplacement).
  await ctx.client.rollbackTurn(
    { sessionId: ctx.sessionId, toSeq, expectedLastSeq: lastSeq, requestId: `${requestId}-rollback` },
    ctx.callOptions,
  );
  if (replacement.length > 0) {
    await append(ctx, replacement, requestId);
  }
}

/**
 * A retry after the rollback of this operation was applied and its append
 * was not (the process died between them): the rollback's request, rebuilt,
 * is answered from the server's request log with the seqs it rolled back;
 * then the replacement is appended. Anything else (no such rollback: the
 * rebuilt request rolls back nothing) fails the precondition.
 */
async function resumeReplacement(
  ctx: HistoryContext,
  replacement: AgentInputItem[],
  requestId: string,
  lastSeq: bigint,
): Promise<void> {
  const stale = precondition("Session history suffix no longer matches the transaction precondition.");
  const newest = await ctx.client.listMessages({ sessionId: ctx.sessionId, newestFirst: true, pageSize: 1 }, ctx.callOptions);
  let rolledBack: bigint[];
  try {
    const answer = await ctx.client.rollbackTurn(
      {
        sessionId: ctx.sessionId,
        toSeq: newest.messages[0]?.seq ?? 0n,
        expectedLastSeq: lastSeq,
        requestId: `${requestId}-rollback`,
      },
      ctx.callOptions,
    );
    rolledBack = answer.rolledBackSeqs;
  } catch (err) {
    if (err instanceof ConnectError && (err.code === Code.InvalidArgument || err.code === Code.Aborted)) {
      throw stale; // REQUEST_ID_REUSED (the session changed since) or a concurrent writer
    }
    throw err;
  }
  if (rolledBack.length === 0) {
    throw stale;
  }
  if (replacement.length > 0) {
    await append(ctx, replacement, requestId);
  }
}

/**
 * The seq to roll back to so that exactly `prefix` stays: the active message
 * before the newest one whose replay (BuildModelInput as_of_seq) renders `prefix`.
 * A suffix that starts inside a message (items the server stored together)
 * has none: FAILED_PRECONDITION, nothing changed.
 */
async function seqBefore(ctx: HistoryContext, prefix: AgentInputItem[]): Promise<bigint> {
  let found = false;
  let pageToken = "";
  for (;;) {
    const page = await ctx.client.listMessages(
      { sessionId: ctx.sessionId, newestFirst: true, pageSize: 20, pageToken },
      ctx.callOptions,
    );
    for (const message of page.messages) {
      if (found) {
        return message.seq; // the newest active message before the suffix
      }
      found = await rendersBefore(ctx, message.seq, prefix);
    }
    if (page.nextPageToken === "") {
      if (found) {
        return 0n; // the suffix starts at the first message
      }
      throw precondition("Session history suffix does not start at a stored message; nothing was replaced.");
    }
    pageToken = page.nextPageToken;
  }
}

/**
 * Whether the input just before message `seq` (BuildModelInput as_of_seq) is
 * `prefix`; FAILED_PRECONDITION once it is shorter (the suffix starts inside a message).
 */
async function rendersBefore(ctx: HistoryContext, seq: bigint, prefix: AgentInputItem[]): Promise<boolean> {
  const before = await ctx.client.buildModelInput(
    { sessionId: ctx.sessionId, format: ModelInputFormat.OPENAI_RESPONSES, asOfSeq: seq, view: ModelInputView.BASIC },
    ctx.callOptions,
  );
  const items = ctx.fromRendered(before.renderedJson);
  if (items.length < prefix.length) {
    throw precondition("Session history suffix does not start at a stored message; nothing was replaced.");
  }
  return items.length === prefix.length && sameItems(ctx, items, prefix);
}
