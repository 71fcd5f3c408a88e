/**
 * Typed TypeScript client for ctxwarden, the gRPC sidecar that owns the
 * context of LLM agents.
 *
 *     import { createClient, user } from "@ctxwarden/client";
 *
 *     const client = createClient("127.0.0.1:50051"); // { apiKey } for a server that requires one
 *     const session = await client.createSession({ session: { systemPrompt: "Be terse." } });
 *     await client.appendMessages({ sessionId: session.sessionId, messages: [user("hello")] });
 *     const input = await client.buildModelInput({ sessionId: session.sessionId });
 *     client.close();
 *
 * Every method is the generated, fully typed `ctxwarden.v1.ContextService`
 * method (protobuf-es messages in and out, Promises, AbortSignal, timeouts),
 * spoken as real gRPC over HTTP/2 by Connect for Node. Failed calls reject
 * with a `ConnectError`; `errorReason(err)` gives the stable ErrorInfo reason.
 */
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { FieldMaskSchema, anyIs, anyUnpack, type Duration, type FieldMask } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createClient as createConnectClient,
  type CallOptions,
  type Client,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import type { SecureClientSessionOptions } from "node:http2";

import { ContextService, type ListSessionsRequestSchema } from "./gen/ctxwarden/v1/context_service_pb.js";
import type { ListMemoriesRequestSchema, Memory } from "./gen/ctxwarden/v1/memory_pb.js";
import {
  ContentBlockSchema,
  MessageSchema,
  Role,
  StopReason,
  ToolCallSchema,
  type ContentBlock,
  type Message,
  type ToolCall,
} from "./gen/ctxwarden/v1/message_pb.js";
import { ToolDefinitionSchema, type Session, type ToolDefinition } from "./gen/ctxwarden/v1/session_pb.js";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  type BadRequest,
  type ErrorInfo,
} from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema, type Status } from "./gen/google/rpc/status_pb.js";

// The whole generated contract: messages, enums and the service descriptor.
export * from "./gen/ctxwarden/v1/context_service_pb.js";
export * from "./gen/ctxwarden/v1/memory_pb.js";
export * from "./gen/ctxwarden/v1/message_pb.js";
export * from "./gen/ctxwarden/v1/session_pb.js";
export {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
  type BadRequest,
  type BadRequest_FieldViolation,
  type ErrorInfo,
  type RetryInfo,
} from "./gen/google/rpc/error_details_pb.js";
export { StatusSchema, type Status } from "./gen/google/rpc/status_pb.js";
export {
  INPUT_CACHE_SESSIONS,
  InputCache,
  type BuildModelInputClient,
  type BuildModelInputRequestInit,
  type InputCacheOptions,
} from "./input-cache.js";
export {
  MessageStream,
  openMessageStream,
  systemTimer,
  type AppendRequest,
  type MessageStreamOptions,
  type StreamMessagesClient,
  type WindowTimer,
} from "./message-stream.js";
export {
  ProviderResponseError,
  isEventStream,
  modelOutputJson,
  sseDataJson,
  type ModelOutputOptions,
} from "./provider.js";
// What callers need most often from the runtime libraries.
export { create, toJson, toJsonString } from "@bufbuild/protobuf";
export { Code, ConnectError } from "@connectrpc/connect";
export type { CallOptions, Interceptor, Transport } from "@connectrpc/connect";

/** The default server address (the server's default `--listen`). */
export const DEFAULT_TARGET = "127.0.0.1:50051";
/** The default per-call deadline. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** ErrorInfo.domain of every ctxwarden error. */
export const ERROR_DOMAIN = "ctxwarden.dev";
/** The trailer carrying the serialized google.rpc.Status. */
export const STATUS_DETAILS_TRAILER = "grpc-status-details-bin";

/** The typed `ctxwarden.v1.ContextService` client. */
export type ContextServiceClient = Client<typeof ContextService>;

/** The service client plus connection management. */
export type CtxwardenClient = ContextServiceClient & {
  /** The base URL calls go to, e.g. `http://127.0.0.1:50051`. */
  readonly baseUrl: string;
  /** The underlying Connect transport (to build more clients on the same connection). */
  readonly transport: Transport;
  /** Closes the HTTP/2 connection; calls in flight fail. Idempotent. */
  close(): void;
};

/** When and how to retry calls that failed with UNAVAILABLE. */
export interface RetryOptions {
  /** Attempts in total, the first included (default 4). 1 disables retries. */
  maxAttempts?: number;
  /** Backoff before the first retry (default 100 ms); doubles each retry, with jitter. */
  initialBackoffMs?: number;
  /** Backoff cap (default 2 s). */
  maxBackoffMs?: number;
}

export interface ClientOptions {
  /**
   * Default deadline of every call in ms (default 30 s); 0 means none. A call
   * can override it with `{ timeoutMs }` in its CallOptions. Retries stay
   * within the call's deadline.
   */
  timeoutMs?: number;
  /**
   * Retries of UNAVAILABLE for idempotent calls (reads, CommitCompaction, and
   * writes that carry a request_id or, for appends, a message_id on every
   * message). `false` disables them.
   */
  retry?: RetryOptions | false;
  /** More interceptors, run inside the retry interceptor (once per attempt). */
  interceptors?: Interceptor[];
  /**
   * API key sent with every call as `authorization: Bearer <apiKey>`: a key of
   * the server's `--api-keys-file` (or a JWT the server's `--jwt-jwks-file`
   * accepts). Without it, a server that requires credentials rejects calls
   * with `Code.Unauthenticated`. The key goes over TLS (an `https://` target)
   * or, in plaintext, only to a loopback host (127.0.0.0/8, `::1`,
   * `localhost`): for a plaintext target elsewhere `createClient` throws
   * unless `allowInsecureApiKey` is set.
   */
  apiKey?: string;
  /**
   * Send `apiKey` over plaintext HTTP/2 to a host that is not loopback
   * (readable by anyone on the path; e.g. a sidecar reached over a private
   * pod network). Default false.
   */
  allowInsecureApiKey?: boolean;
  /**
   * TLS settings of an `https://` target (Node's `http2.connect` options):
   * `ca` to trust a private CA, `cert` and `key` for a client certificate
   * (a server started with `--tls-client-ca`), `servername`. Without them
   * the system's CAs are trusted.
   */
  tls?: Pick<SecureClientSessionOptions, "ca" | "cert" | "key" | "passphrase" | "pfx" | "servername" | "rejectUnauthorized">;
  /** HTTP/2 keep-alive settings (see Connect's Http2SessionOptions). */
  pingIntervalMs?: number;
  /** Close the connection after it was idle this long (default 15 min). */
  idleConnectionTimeoutMs?: number;
}

/**
 * Returns the typed ctxwarden client for `target`: `host:port` (plaintext
 * HTTP/2, like the server's default listener) or a full `http://` /
 * `https://` URL (`https://` is gRPC over TLS). Call `close()` when done.
 */
export function createClient(
  target: string = DEFAULT_TARGET,
  opts: ClientOptions = {},
): CtxwardenClient {
  const baseUrl = /^https?:\/\//.test(target) ? target.replace(/\/+$/, "") : `http://${target}`;
  const url = new URL(baseUrl);
  if (opts.apiKey !== undefined) {
    if (opts.apiKey.trim() === "" || opts.apiKey !== opts.apiKey.trim()) {
      // The server strips the token: a key with outer whitespace could never match.
      throw new Error("createClient: apiKey must be non-empty, without leading or trailing whitespace");
    }
    if (url.protocol === "http:" && !isLoopbackHost(url.hostname) && opts.allowInsecureApiKey !== true) {
      throw new Error(
        `createClient: the apiKey would go in plaintext to ${url.host}: use an https:// target (TLS), ` +
          "or set allowInsecureApiKey if that network is trusted",
      );
    }
  }
  if (opts.tls !== undefined && url.protocol !== "https:") {
    throw new Error(`createClient: tls options need an https:// target, not ${baseUrl}`);
  }
  const sessionOptions = {
    ...(opts.pingIntervalMs !== undefined ? { pingIntervalMs: opts.pingIntervalMs } : {}),
    ...(opts.idleConnectionTimeoutMs !== undefined
      ? { idleConnectionTimeoutMs: opts.idleConnectionTimeoutMs }
      : {}),
  };
  const sessionManager = new Http2SessionManager(baseUrl, sessionOptions, opts.tls);
  const interceptors: Interceptor[] = [];
  if (opts.retry !== false) {
    interceptors.push(retryUnavailable(opts.retry ?? {}));
  }
  if (opts.apiKey !== undefined) {
    interceptors.push(bearerToken(opts.apiKey));
  }
  interceptors.push(...(opts.interceptors ?? []));
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager,
    defaultTimeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    interceptors,
  });
  const client = createConnectClient(ContextService, transport);
  return Object.assign(client, {
    baseUrl,
    transport,
    close(): void {
      sessionManager.abort();
    },
  });
}

// ---------------------------------------------------------------------------
// Authentication

/**
 * An interceptor that sends `authorization: Bearer <token>` with every call:
 * what `createClient`'s `apiKey` option installs. Use it directly with a
 * transport of your own, or write a similar one for a token that changes
 * (e.g. a JWT refreshed before it expires).
 */
export function bearerToken(token: string): Interceptor {
  const value = `Bearer ${token}`;
  return (next) => async (req) => {
    req.header.set("authorization", value);
    return await next(req);
  };
}

/** Whether `hostname` (as `URL.hostname` gives it) is a loopback address or localhost. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[(.*)\]$/, "$1").replace(/\.$/, "");
  return (
    host === "localhost" ||
    host === "::1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ||
    /^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ||
    /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(host)
  );
}

// ---------------------------------------------------------------------------
// Retries

const readOnlyMethods = new Set([
  "GetSession",
  "ListSessions",
  "ListMessages",
  "ListCompactions",
  "GetToolOutput",
  "CountTokens",
  // Makes a plan and changes nothing else; plans expire on their own.
  "PrepareCompaction",
  // Documented as idempotent per plan.
  "CommitCompaction",
]);

/** Whether a unary call may safely be sent again after UNAVAILABLE. */
export function isIdempotent(methodName: string, message: unknown): boolean {
  if (readOnlyMethods.has(methodName)) {
    return true;
  }
  const m = message as {
    requestId?: string;
    autoCompact?: boolean;
    messages?: { messageId?: string }[];
  };
  switch (methodName) {
    case "BuildModelInput":
      // auto_compact may write a checkpoint.
      return m.autoCompact !== true;
    case "AppendMessages":
      return (
        Boolean(m.requestId) ||
        (m.messages !== undefined &&
          m.messages.length > 0 &&
          m.messages.every((msg) => Boolean(msg.messageId)))
      );
    case "CreateSession":
    case "AppendModelOutput":
    case "RollbackTurn":
    case "Compact":
      return Boolean(m.requestId);
    default:
      return false;
  }
}

/** Parses a `grpc-timeout` header value ("30000m", "30S"...) into ms. */
function parseGrpcTimeout(value: string | null): number | undefined {
  const match = value === null ? null : /^(\d{1,8})([HMSmun])$/.exec(value);
  if (match === null) {
    return undefined;
  }
  const unitMs: Record<string, number> = { H: 3.6e6, M: 6e4, S: 1e3, m: 1, u: 1e-3, n: 1e-6 };
  return Number(match[1]) * (unitMs[match[2] as string] as number);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(ConnectError.from(signal.reason, Code.Canceled));
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(ConnectError.from(signal.reason, Code.Canceled));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * An interceptor that retries unary calls failing with UNAVAILABLE when
 * `isIdempotent` says so, with exponential backoff and full jitter, and never
 * past the call's deadline (each attempt's `grpc-timeout` is what remains).
 */
export function retryUnavailable(opts: RetryOptions = {}): Interceptor {
  const maxAttempts = Math.max(1, opts.maxAttempts ?? 4);
  const initialBackoffMs = opts.initialBackoffMs ?? 100;
  const maxBackoffMs = opts.maxBackoffMs ?? 2_000;
  return (next) => async (req) => {
    if (req.stream || maxAttempts === 1 || !isIdempotent(req.method.name, req.message)) {
      return await next(req);
    }
    const started = Date.now();
    const timeoutMs = parseGrpcTimeout(req.header.get("grpc-timeout"));
    for (let attempt = 1; ; attempt++) {
      const header = new Headers(req.header);
      if (timeoutMs !== undefined && attempt > 1) {
        const remaining = Math.max(1, Math.floor(timeoutMs - (Date.now() - started)));
        header.set("grpc-timeout", `${remaining}m`);
      }
      try {
        return await next({ ...req, header });
      } catch (err) {
        const code = err instanceof ConnectError ? err.code : undefined;
        if (code !== Code.Unavailable || attempt >= maxAttempts || req.signal.aborted) {
          throw err;
        }
        const cap = Math.min(maxBackoffMs, initialBackoffMs * 2 ** (attempt - 1));
        const backoff = Math.random() * cap;
        if (timeoutMs !== undefined && Date.now() - started + backoff >= timeoutMs) {
          throw err;
        }
        await sleep(backoff, req.signal);
      }
    }
  };
}

// ---------------------------------------------------------------------------
// Errors

function decodeBase64(value: string): Uint8Array {
  // gRPC binary metadata is base64, padding optional; Buffer accepts both.
  return new Uint8Array(Buffer.from(value, "base64"));
}

/**
 * The google.rpc.Status of a failed call, decoded from the
 * `grpc-status-details-bin` trailer; undefined when the error carries none.
 */
export function errorStatus(err: unknown): Status | undefined {
  if (!(err instanceof ConnectError)) {
    return undefined;
  }
  const raw = err.metadata.get(STATUS_DETAILS_TRAILER);
  if (raw === null) {
    return undefined;
  }
  try {
    // A trailer repeated by a proxy is joined with ", "; the first is the server's.
    return fromBinary(StatusSchema, decodeBase64(raw.split(",")[0]!.trim()));
  } catch {
    return undefined;
  }
}

/** The ErrorInfo detail of a failed call (domain "ctxwarden.dev"), if any. */
export function errorInfo(err: unknown): ErrorInfo | undefined {
  if (!(err instanceof ConnectError)) {
    return undefined;
  }
  const fromDetails = err.findDetails(ErrorInfoSchema)[0];
  if (fromDetails !== undefined) {
    return fromDetails;
  }
  for (const any of errorStatus(err)?.details ?? []) {
    if (anyIs(any, ErrorInfoSchema)) {
      return anyUnpack(any, ErrorInfoSchema);
    }
  }
  return undefined;
}

/**
 * The stable machine-readable reason of a failed call, e.g.
 * `SESSION_NOT_FOUND`; undefined for errors without an ErrorInfo (including
 * errors that are not gRPC errors at all).
 */
export function errorReason(err: unknown): string | undefined {
  const reason = errorInfo(err)?.reason;
  return reason === undefined || reason === "" ? undefined : reason;
}

/** The BadRequest detail (which field was wrong) of an INVALID_ARGUMENT error. */
export function badRequest(err: unknown): BadRequest | undefined {
  return err instanceof ConnectError ? err.findDetails(BadRequestSchema)[0] : undefined;
}

/** A google.protobuf.Duration in milliseconds (0 when unset). */
export function durationMs(d: Duration | undefined): number {
  return d === undefined ? 0 : Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
}

// ---------------------------------------------------------------------------
// Message builders

type MessageInit = MessageInitShape<typeof MessageSchema>;
/** Extra fields for a builder: any Message field except the ones it sets. */
export type MessageExtras = Omit<MessageInit, "$typeName" | "role" | "content">;

function textBlock(text: string): ContentBlock {
  return create(ContentBlockSchema, { block: { case: "text", value: { text } } });
}

/** A user message. */
export function user(text: string, extras: MessageExtras = {}): Message {
  return create(MessageSchema, { ...extras, role: Role.USER, content: [textBlock(text)] });
}

/**
 * An assistant message: `text` (may be empty when it only calls tools) and
 * tool calls. The stop reason is TOOL_USE with calls, else STOP.
 */
export function assistant(text: string, calls: ToolCall[] = [], extras: MessageExtras = {}): Message {
  const content: ContentBlock[] = text === "" ? [] : [textBlock(text)];
  for (const call of calls) {
    content.push(create(ContentBlockSchema, { block: { case: "toolCall", value: call } }));
  }
  return create(MessageSchema, {
    stopReason: calls.length > 0 ? StopReason.TOOL_USE : StopReason.STOP,
    ...extras,
    role: Role.ASSISTANT,
    content,
  });
}

/**
 * A failed model call recorded as an assistant message (STOP_REASON_ERROR,
 * no content): append it, then call RollbackTurn to learn what to do.
 */
export function assistantError(errorMessage: string, extras: MessageExtras = {}): Message {
  return create(MessageSchema, {
    ...extras,
    role: Role.ASSISTANT,
    content: [],
    stopReason: extras.stopReason ?? StopReason.ERROR,
    errorMessage,
  });
}

/** A tool call; `args` is a JSON object (serialized here) or JSON text. */
export function toolCall(id: string, name: string, args: Record<string, unknown> | string = {}): ToolCall {
  const argumentsJson = typeof args === "string" ? args : JSON.stringify(args);
  return create(ToolCallSchema, { id, name, argumentsJson });
}

/** The result of tool call `callId`. */
export function toolResult(
  callId: string,
  text: string,
  opts: { toolName?: string; isError?: boolean } & MessageExtras = {},
): Message {
  const { toolName = "", isError = false, ...extras } = opts;
  return create(MessageSchema, {
    ...extras,
    role: Role.TOOL_RESULT,
    toolCallId: callId,
    toolName,
    isError,
    content: [textBlock(text)],
  });
}

/** A tool the model may call; `parameters` is a JSON Schema object or its JSON text. */
export function toolDefinition(
  name: string,
  description: string,
  parameters: Record<string, unknown> | string = { type: "object" },
): ToolDefinition {
  const parametersJson = typeof parameters === "string" ? parameters : JSON.stringify(parameters);
  return create(ToolDefinitionSchema, { name, description, parametersJson });
}

/** The text of a message's text blocks, joined with newlines. */
export function messageText(message: Message): string {
  return message.content
    .flatMap((b) => (b.block.case === "text" ? [b.block.value.text] : []))
    .join("\n");
}

/** The tool calls of a message, in order (e.g. of the answer AppendModelOutput stored). */
export function messageToolCalls(message: Message): ToolCall[] {
  return message.content.flatMap((b) => (b.block.case === "toolCall" ? [b.block.value] : []));
}

// ---------------------------------------------------------------------------
// Sessions

/**
 * A google.protobuf.FieldMask for UpdateSession's `updateMask`. Paths are the
 * proto field names; camelCase ones are converted (`"systemPrompt"` ->
 * `"system_prompt"`).
 */
export function fieldMask(...paths: string[]): FieldMask {
  return create(FieldMaskSchema, {
    paths: paths.map((p) => p.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)),
  });
}

/** Yields every item of every page, following `nextPageToken` (AIP-158). */
async function* allPages<Item>(
  fetch: (pageToken: string) => Promise<{ items: Item[]; nextPageToken: string }>,
  firstToken: string,
): AsyncGenerator<Item, void, undefined> {
  let pageToken = firstToken;
  for (;;) {
    const page = await fetch(pageToken);
    yield* page.items;
    if (page.nextPageToken === "") {
      return;
    }
    pageToken = page.nextPageToken;
  }
}

/**
 * Every session matching `request` (filters and `pageSize`), newest first,
 * following `nextPageToken` page after page.
 */
export function listAllSessions(
  client: Pick<ContextServiceClient, "listSessions">,
  request: MessageInitShape<typeof ListSessionsRequestSchema> = {},
  options?: CallOptions,
): AsyncGenerator<Session, void, undefined> {
  return allPages(async (pageToken) => {
    const page = await client.listSessions({ ...request, pageToken }, options);
    return { items: page.sessions, nextPageToken: page.nextPageToken };
  }, request.pageToken ?? "");
}

/**
 * Every memory matching `request` (user, project, key, labels, state), newest
 * first, following `nextPageToken` page after page.
 */
export function listAllMemories(
  client: Pick<ContextServiceClient, "listMemories">,
  request: MessageInitShape<typeof ListMemoriesRequestSchema> = {},
  options?: CallOptions,
): AsyncGenerator<Memory, void, undefined> {
  return allPages(async (pageToken) => {
    const page = await client.listMemories({ ...request, pageToken }, options);
    return { items: page.memories, nextPageToken: page.nextPageToken };
  }, request.pageToken ?? "");
}
