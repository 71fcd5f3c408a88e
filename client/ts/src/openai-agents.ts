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
 * Only types come from `@openai/agents-core` (an optional peer dependency):
 * this module loads none of it at run time.
 */
import type {
  AgentInputItem,
  AssistantMessageItem,
  FunctionCallItem,
  FunctionCallResultItem,
  ReasoningItem,
  Session,
  UserMessageItem,
} from "@openai/agents-core";
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

/** The ContextService methods a CtxwardenSession calls. */
export type AgentsSessionClient = Pick<
  Client<typeof ContextService>,
  "createSession" | "getSession" | "deleteSession" | "appendModelOutput" | "buildModelInput" | "rollbackTurn" | "listMessages"
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

// ---------------------------------------------------------------------------
// Agents SDK items <-> OpenAI Responses input items (the wire format)

type Wire = Record<string, unknown>;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function withId(out: Wire, id: string | undefined): Wire {
  if (id !== undefined) {
    out["id"] = id;
  }
  return out;
}

function snakeCase(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function camelCase(key: string): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** An image reference (a data URL, a URL or raw base64) as Responses' image_url. */
function imageUrl(image: string): string {
  return /^(data:|https?:)/.test(image) ? image : `data:image/png;base64,${image}`;
}

function userPartToWire(part: unknown): unknown {
  if (!isRecord(part)) {
    return part;
  }
  switch (part["type"]) {
    case "input_text":
      return { type: "input_text", text: part["text"] };
    case "input_image": {
      const out: Wire = { type: "input_image" };
      const image = part["image"];
      if (typeof image === "string") {
        out["image_url"] = imageUrl(image);
      } else if (isRecord(image) && typeof image["id"] === "string") {
        out["file_id"] = image["id"];
      }
      if (part["detail"] !== undefined) {
        out["detail"] = part["detail"];
      }
      return out;
    }
    case "input_file": {
      const out: Wire = { type: "input_file" };
      const file = part["file"];
      if (typeof file === "string") {
        out[/^https?:/.test(file) ? "file_url" : "file_data"] = file;
      } else if (isRecord(file) && typeof file["id"] === "string") {
        out["file_id"] = file["id"];
      } else if (isRecord(file) && typeof file["url"] === "string") {
        out["file_url"] = file["url"];
      }
      if (part["filename"] !== undefined) {
        out["filename"] = part["filename"];
      }
      return out;
    }
    default:
      return genericToWire(part);
  }
}

function userPartFromWire(part: unknown): unknown {
  if (!isRecord(part)) {
    return part;
  }
  switch (part["type"]) {
    case "input_text":
      return { type: "input_text", text: part["text"] };
    case "input_image": {
      const out: Wire = { type: "input_image" };
      if (typeof part["image_url"] === "string") {
        out["image"] = part["image_url"];
      } else if (typeof part["file_id"] === "string") {
        out["image"] = { id: part["file_id"] };
      }
      // "auto" is the default the server fills in.
      if (part["detail"] !== undefined && part["detail"] !== "auto") {
        out["detail"] = part["detail"];
      }
      return out;
    }
    case "input_file": {
      const out: Wire = { type: "input_file" };
      if (typeof part["file_data"] === "string") {
        out["file"] = part["file_data"];
      } else if (typeof part["file_id"] === "string") {
        out["file"] = { id: part["file_id"] };
      } else if (typeof part["file_url"] === "string") {
        out["file"] = { url: part["file_url"] };
      }
      if (part["filename"] !== undefined) {
        out["filename"] = part["filename"];
      }
      return out;
    }
    default:
      return genericFromWire(part);
  }
}

function toolOutputToWire(output: FunctionCallResultItem["output"]): unknown {
  if (typeof output === "string") {
    return output;
  }
  if (Array.isArray(output)) {
    return output.map(userPartToWire);
  }
  switch (output.type) {
    case "text":
      return output.text;
    case "image":
      if (typeof output.image === "string") {
        return [{ type: "input_image", image_url: imageUrl(output.image) }];
      }
      return JSON.stringify(output);
    default:
      return JSON.stringify(output);
  }
}

/** Any other item: its keys in snake_case, its providerData's members merged in. */
function genericToWire(item: Record<string, unknown>): Wire {
  const out: Wire = {};
  for (const [key, value] of Object.entries(item)) {
    if (key === "providerData" && isRecord(value)) {
      for (const [k, v] of Object.entries(value)) {
        out[snakeCase(k)] = v;
      }
    } else {
      out[snakeCase(key)] = value;
    }
  }
  return out;
}

function genericFromWire(item: Record<string, unknown>): Wire {
  const out: Wire = {};
  for (const [key, value] of Object.entries(item)) {
    out[camelCase(key)] = value;
  }
  return out;
}

/** An Agents SDK item as an OpenAI Responses input item (AppendModelOutput's items_json). */
export function toResponsesItem(item: AgentInputItem): Wire {
  if ("role" in item) {
    switch (item.role) {
      case "user":
        return withId(
          {
            type: "message",
            role: "user",
            content: typeof item.content === "string" ? item.content : item.content.map(userPartToWire),
          },
          item.id,
        );
      case "system":
        return withId({ type: "message", role: "system", content: item.content }, item.id);
      case "assistant":
        return withId(
          {
            type: "message",
            role: "assistant",
            status: item.status,
            content: item.content.map((part) => {
              switch (part.type) {
                case "output_text":
                  return { type: "output_text", text: part.text, annotations: [] };
                case "refusal":
                  return { type: "refusal", refusal: part.refusal };
                default:
                  return genericToWire(part);
              }
            }),
          },
          item.id,
        );
    }
  }
  switch (item.type) {
    case "function_call":
      return withId(
        {
          type: "function_call",
          call_id: item.callId,
          name: item.name,
          arguments: item.arguments,
          ...(item.status !== undefined ? { status: item.status } : {}),
          ...(item.namespace !== undefined ? { namespace: item.namespace } : {}),
        },
        item.id,
      );
    case "function_call_result":
      return withId(
        { type: "function_call_output", call_id: item.callId, output: toolOutputToWire(item.output) },
        item.id,
      );
    case "reasoning": {
      const out: Wire = {
        type: "reasoning",
        summary: item.content.map((c) => ({ type: "summary_text", text: c.text })),
      };
      if (item.rawContent !== undefined) {
        out["content"] = item.rawContent.map((c) => ({ type: "reasoning_text", text: c.text }));
      }
      const encrypted = item.providerData?.["encryptedContent"] ?? item.providerData?.["encrypted_content"];
      if (typeof encrypted === "string") {
        out["encrypted_content"] = encrypted;
      }
      return withId(out, item.id);
    }
    default:
      return genericToWire(item as Record<string, unknown>);
  }
}

/** OpenAI Responses input items (BuildModelInput's rendered `input`) as Agents SDK items. */
export function fromResponsesItems(wire: unknown[]): AgentInputItem[] {
  // function_call_output names no tool; the Agents SDK item does.
  const toolNames = new Map<string, string>();
  for (const w of wire) {
    if (isRecord(w) && w["type"] === "function_call" && typeof w["call_id"] === "string") {
      toolNames.set(w["call_id"], String(w["name"] ?? ""));
    }
  }
  return wire.filter(isRecord).map((w) => fromResponsesItem(w, toolNames));
}

function fromResponsesItem(w: Record<string, unknown>, toolNames: Map<string, string>): AgentInputItem {
  const role = w["role"];
  if ((w["type"] === undefined || w["type"] === "message") && typeof role === "string") {
    const content = w["content"];
    switch (role) {
      case "user": {
        const item: UserMessageItem = {
          role: "user",
          content: typeof content === "string" ? content : (asArray(content).map(userPartFromWire) as UserMessageItem["content"]),
        };
        return item;
      }
      case "assistant": {
        const parts =
          typeof content === "string"
            ? [{ type: "output_text" as const, text: content }]
            : asArray(content).map((part) => {
                if (isRecord(part) && part["type"] === "output_text") {
                  return { type: "output_text" as const, text: String(part["text"] ?? "") };
                }
                if (isRecord(part) && part["type"] === "refusal") {
                  return { type: "refusal" as const, refusal: String(part["refusal"] ?? "") };
                }
                return genericFromWire(isRecord(part) ? part : {});
              });
        const status = w["status"];
        const item: AssistantMessageItem = {
          role: "assistant",
          status: status === "in_progress" || status === "incomplete" ? status : "completed",
          content: parts as AssistantMessageItem["content"],
        };
        return item;
      }
      default:
        // system, developer: text only.
        return {
          role: "system",
          content:
            typeof content === "string"
              ? content
              : asArray(content)
                  .map((p) => (isRecord(p) ? String(p["text"] ?? "") : ""))
                  .join("\n"),
        };
    }
  }
  switch (w["type"]) {
    case "function_call": {
      const item: FunctionCallItem = {
        type: "function_call",
        callId: String(w["call_id"] ?? ""),
        name: String(w["name"] ?? ""),
        arguments: String(w["arguments"] ?? ""),
        status: "completed",
      };
      if (typeof w["namespace"] === "string") {
        item.namespace = w["namespace"];
      }
      return item;
    }
    case "function_call_output": {
      const callId = String(w["call_id"] ?? "");
      const output = w["output"];
      const item: FunctionCallResultItem = {
        type: "function_call_result",
        callId,
        name: toolNames.get(callId) ?? "",
        status: "completed",
        output:
          typeof output === "string"
            ? output
            : (asArray(output).map(userPartFromWire) as Extract<FunctionCallResultItem["output"], unknown[]>),
      };
      return item;
    }
    case "reasoning": {
      const item: ReasoningItem = {
        type: "reasoning",
        content: asArray(w["summary"]).map((s) => ({
          type: "input_text" as const,
          text: isRecord(s) ? String(s["text"] ?? "") : "",
        })),
      };
      if (Array.isArray(w["content"])) {
        item.rawContent = w["content"].map((c) => ({
          type: "reasoning_text" as const,
          text: isRecord(c) ? String(c["text"] ?? "") : "",
        }));
      }
      if (typeof w["id"] === "string") {
        item.id = w["id"];
      }
      if (typeof w["encrypted_content"] === "string") {
        item.providerData = { encryptedContent: w["encrypted_content"] };
      }
      return item;
    }
    default:
      return genericFromWire(w) as AgentInputItem;
  }
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/** The items of a rendered OPENAI_RESPONSES input (`{"instructions", "input": [...]}`). */
export function fromResponsesInput(renderedJson: string): AgentInputItem[] {
  if (renderedJson === "") {
    return [];
  }
  const parsed: unknown = JSON.parse(renderedJson);
  if (!isRecord(parsed)) {
    throw new Error("BuildModelInput rendered OPENAI_RESPONSES input that is not a JSON object");
  }
  return fromResponsesItems(asArray(parsed["input"]));
}
