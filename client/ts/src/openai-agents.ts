/**
 * A `Session` for the OpenAI Agents SDK (`@openai/agents`) kept by ctxwarden.
 *
 *     import { run } from "@openai/agents";
 *     import { CtxwardenSession } from "@ctxwarden/client/openai-agents";
 *
 *     const session = new CtxwardenSession(client, { sessionId: "chat-42" });
 *     await run(agent, "What's in README.md?", { session });
 *
 * Items are stored in ctxwarden's own model, not as opaque JSON: `addItems`
 * appends them with AppendModelOutput (`items_json`, format
 * OPENAI_RESPONSES), and `getItems` reads the effective context back with
 * BuildModelInput (format OPENAI_RESPONSES, through an `InputCache`), so
 * compaction, tool-output truncation and the other views apply to what the
 * agent sees. What comes back is therefore the model's view of the history,
 * not a byte-exact copy of the items added: item IDs and provider metadata
 * the Responses input does not carry are not kept, a compacted history starts
 * with its summary, and reasoning items come back as OpenAI sent them (id,
 * summary, encrypted content).
 *
 * With `@openai/agents-core` 0.20 the session also takes the SDK's history
 * changes without deleting history (see openai-agents-history.ts):
 * `replaceHistoryWithCompaction` (a provider compaction item becomes the
 * start of the effective context through a ctxwarden checkpoint) and
 * `applyHistoryTransaction` (idempotent appends keyed by the operation ID,
 * and suffix replacements that roll back instead of deleting).
 *
 * Only types come from `@openai/agents-core` (an optional peer dependency):
 * this module loads none of it at run time.
 */
import type { AgentInputItem, Session } from "@openai/agents-core";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions } from "@connectrpc/connect";

import {
  ModelInputFormat,
  type ContextService,
  type CreateSessionRequestSchema,
  type ModelInput,
} from "./gen/ctxwarden/v1/context_service_pb.js";
import type { Client } from "@connectrpc/connect";
import { InputCache } from "./input-cache.js";
import { comparableItems, fromResponsesInput, toResponsesItem } from "./openai-agents-items.js";
import {
  applyTransaction,
  replaceWithCompaction,
  type HistoryContext,
  type HistoryTransactionArgs,
} from "./openai-agents-history.js";

export { comparableItems, fromResponsesInput, fromResponsesItems, toResponsesItem } from "./openai-agents-items.js";
export {
  PROVIDER_COMPACTION_SUMMARY,
  PROVIDER_COMPACTION_TURN_PREFIX,
  operationRequestId,
  type HistoryTransaction,
  type HistoryTransactionArgs,
} from "./openai-agents-history.js";

/** The ContextService methods a CtxwardenSession calls. */
export type AgentsSessionClient = Pick<
  Client<typeof ContextService>,
  | "createSession"
  | "getSession"
  | "deleteSession"
  | "appendModelOutput"
  | "buildModelInput"
  | "rollbackTurn"
  | "listMessages"
  | "prepareCompaction"
  | "commitCompaction"
>;

/** What CreateSession takes for a new session (the `session` field). */
export type SessionTemplate = NonNullable<MessageInitShape<typeof CreateSessionRequestSchema>["session"]>;

export interface CtxwardenSessionOptions {
  /**
   * The ctxwarden session to use. It is created (from `session`) on first use
   * if it does not exist; without an ID the server assigns one on first use.
   */
  sessionId?: string;
  /** The session to create (system prompt, tools, model, labels, policy...). */
  session?: SessionTemplate;
  /** The cache getItems reads through (default: a new one for this session). */
  inputCache?: InputCache;
  /** BuildModelInputRequest.max_output_tokens of getItems (0: the policy's reserve). */
  maxOutputTokens?: bigint;
  /** BuildModelInputRequest.auto_compact of getItems: compact first when over the threshold. */
  autoCompact?: boolean;
  /** CallOptions of every call (timeouts, signal, headers). */
  callOptions?: CallOptions;
}

/**
 * An `@openai/agents` Session backed by a ctxwarden session.
 *
 * - `getItems(limit?)`: the effective context rendered as OpenAI Responses
 *   input items (`BuildModelInput` format OPENAI_RESPONSES), the newest
 *   `limit` of them with a limit.
 * - `addItems(items)`: one `AppendModelOutput` (`items_json`, OPENAI_RESPONSES).
 * - `popItem()`: rolls back exactly the newest stored message
 *   (`RollbackTurn` to_seq = its seq - 1, expected_last_seq = the session's
 *   last_seq, so a concurrent append makes it fail instead of removing
 *   something else) and returns the last item it rendered as. An assistant
 *   turn whose text and tool calls were added together is one message: its
 *   items go together.
 * - `clearSession()`: deletes the ctxwarden session and creates it again
 *   under the same ID, from the same template.
 */
export class CtxwardenSession implements Session {
  readonly #client: AgentsSessionClient;
  readonly #opts: CtxwardenSessionOptions;
  readonly #cache: InputCache;
  #sessionId: Promise<string> | undefined;

  constructor(client: AgentsSessionClient, opts: CtxwardenSessionOptions = {}) {
    this.#client = client;
    this.#opts = opts;
    this.#cache = opts.inputCache ?? new InputCache(client, { capacity: 1 });
  }

  /** The ctxwarden session ID; creates the session on first use if needed. */
  getSessionId(): Promise<string> {
    if (this.#sessionId === undefined) {
      const started = this.#ensure();
      // A failed start is tried again by the next call.
      started.catch(() => {
        if (this.#sessionId === started) {
          this.#sessionId = undefined;
        }
      });
      this.#sessionId = started;
    }
    return this.#sessionId;
  }

  async #ensure(): Promise<string> {
    const sessionId = this.#opts.sessionId;
    if (sessionId !== undefined && sessionId !== "") {
      try {
        await this.#client.getSession({ sessionId }, this.#opts.callOptions);
        return sessionId;
      } catch (err) {
        if (!(err instanceof ConnectError) || err.code !== Code.NotFound) {
          throw err;
        }
      }
    }
    return await this.#create(sessionId ?? "");
  }

  async #create(sessionId: string): Promise<string> {
    try {
      const created = await this.#client.createSession(
        { sessionId, session: this.#opts.session ?? {} },
        this.#opts.callOptions,
      );
      return created.sessionId;
    } catch (err) {
      // Created by someone else in the meantime: use it.
      if (sessionId !== "" && err instanceof ConnectError && err.code === Code.AlreadyExists) {
        return sessionId;
      }
      throw err;
    }
  }

  async #input(sessionId: string): Promise<ModelInput> {
    return await this.#cache.build(
      {
        sessionId,
        format: ModelInputFormat.OPENAI_RESPONSES,
        maxOutputTokens: this.#opts.maxOutputTokens ?? 0n,
        autoCompact: this.#opts.autoCompact ?? false,
      },
      this.#opts.callOptions,
    );
  }

  async #items(sessionId: string): Promise<AgentInputItem[]> {
    return fromResponsesInput((await this.#input(sessionId)).renderedJson);
  }

  async getItems(limit?: number): Promise<AgentInputItem[]> {
    const items = await this.#items(await this.getSessionId());
    if (limit === undefined) {
      return items;
    }
    return limit <= 0 ? [] : items.slice(-limit);
  }

  async addItems(items: AgentInputItem[]): Promise<void> {
    if (items.length === 0) {
      return;
    }
    const sessionId = await this.getSessionId();
    await this.#client.appendModelOutput(
      {
        sessionId,
        format: ModelInputFormat.OPENAI_RESPONSES,
        output: { case: "itemsJson", value: JSON.stringify(items.map(toResponsesItem)) },
      },
      this.#opts.callOptions,
    );
  }

  async popItem(): Promise<AgentInputItem | undefined> {
    const sessionId = await this.getSessionId();
    const { lastSeq } = await this.#client.getSession({ sessionId }, this.#opts.callOptions);
    const newest = await this.#client.listMessages(
      { sessionId, newestFirst: true, pageSize: 1 },
      this.#opts.callOptions,
    );
    const message = newest.messages[0];
    if (message === undefined) {
      return undefined;
    }
    const before = await this.#items(sessionId);
    await this.#client.rollbackTurn(
      { sessionId, toSeq: message.seq - 1n, expectedLastSeq: lastSeq },
      this.#opts.callOptions,
    );
    const after = await this.#items(sessionId);
    return before.length > after.length ? before.at(-1) : undefined;
  }

  /**
   * `@openai/agents-core` 0.20: the history becomes `items` (a provider
   * `compaction` item first) without losing any: they are appended and a
   * checkpoint starts the effective context at them (see the module comment).
   */
  async replaceHistoryWithCompaction(items: AgentInputItem[]): Promise<void> {
    await replaceWithCompaction(await this.#history(), items);
  }

  /**
   * `@openai/agents-core` 0.20's atomic, idempotent history change:
   * `append_items` is one AppendModelOutput keyed by the operation ID (a
   * retry is answered from the server's request log; another transaction
   * under the same ID fails with REQUEST_ID_REUSED). `replace_suffix` checks
   * the suffix, rolls it back (kept in the history) and appends the
   * replacement; a retry finishes one that stopped between the two calls,
   * and a suffix that no longer matches fails with FAILED_PRECONDITION,
   * nothing changed.
   */
  async applyHistoryTransaction(args: HistoryTransactionArgs): Promise<void> {
    await applyTransaction(await this.#history(), args);
  }

  /**
   * Items as the SDK should compare them with what getItems returns: what a
   * round trip through ctxwarden keeps of each (no IDs, tool names only
   * with their calls, ...).
   */
  prepareHistoryItemsForPersistenceComparison(items: AgentInputItem[]): AgentInputItem[] {
    return comparableItems(items);
  }

  async #history(): Promise<HistoryContext> {
    const sessionId = await this.getSessionId();
    return {
      client: this.#client,
      sessionId,
      callOptions: this.#opts.callOptions,
      items: async () => await this.#items(sessionId),
      comparable: comparableItems,
      toWire: toResponsesItem,
      fromRendered: fromResponsesInput,
    };
  }

  async clearSession(): Promise<void> {
    const sessionId = await this.getSessionId();
    this.#cache.forget(sessionId);
    try {
      await this.#client.deleteSession({ sessionId }, this.#opts.callOptions);
    } catch (err) {
      if (!(err instanceof ConnectError) || err.code !== Code.NotFound) {
        throw err;
      }
    }
    await this.#create(sessionId);
  }
}
