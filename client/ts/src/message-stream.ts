/**
 * A StreamMessages helper that coalesces: appends sent within a short window
 * (default 2 ms) go out as one AppendMessagesRequest, so an agent that sends
 * one message per call gets the throughput of many messages per request
 * without changing its code.
 *
 *     const stream = openMessageStream(client);
 *     const [a, b] = await Promise.all([
 *       stream.send({ sessionId, messages: [user("one")] }),
 *       stream.send({ sessionId, messages: [user("two")] }),
 *     ]);
 *     await stream.close();
 *
 * Each `send` still gets its own answer: its own stored messages (seq,
 * message_id, token_count) and `lastSeq` after its last message;
 * `contextTokens` is the session's after the whole coalesced request. Order is
 * kept: requests go out in the order `send` was called.
 *
 * What is never merged with other sends (it goes alone, as written): a send
 * with a `requestId` (its idempotency key keeps its meaning: a retry returns
 * its first result), a `stateDelta`, no messages, or, unless it starts the
 * batch, an `expectedLastSeq`. Sends to different sessions or with another
 * `view` start a new batch. Message IDs coalesce: the server deduplicates
 * them message by message.
 *
 * Errors: the server ends a stream at its first error and the failing
 * request wrote nothing. When a coalesced request fails that way (a status
 * such as INVALID_ARGUMENT, FAILED_PRECONDITION or ABORTED), its sends and
 * every send after it are written again one by one on a new stream, so the
 * sends before the culprit succeed, the culprit gets its own error, and the
 * sends after it fail with that error, exactly as without coalescing. An
 * error that does not say nothing was written (UNAVAILABLE, DEADLINE_EXCEEDED,
 * CANCELLED, INTERNAL, ...) fails every unanswered send. After an error the
 * stream is over: later sends fail with it.
 *
 * `coalesce: false` sends each request as it comes.
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions, type Client } from "@connectrpc/connect";

import {
  AppendMessagesResponseSchema,
  type AppendMessagesRequestSchema,
  type AppendMessagesResponse,
  type ContextService,
} from "./gen/ctxwarden/v1/context_service_pb.js";

/** What `send` takes: an AppendMessagesRequest (init shape or message). */
export type AppendRequest = MessageInitShape<typeof AppendMessagesRequestSchema>;

/** A timer the stream's window runs on (inject one to drive it from a test). */
export interface WindowTimer {
  set(callback: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

/** setTimeout and clearTimeout. */
export const systemTimer: WindowTimer = {
  set: (callback, ms) => setTimeout(callback, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export interface MessageStreamOptions {
  /** Coalesce sends that arrive within `windowMs` (default true). */
  coalesce?: boolean;
  /** How long a batch waits for more sends, in ms (default 2). */
  windowMs?: number;
  /** A batch goes out once it has this many messages (default 100; the server takes up to 1000). */
  maxBatchMessages?: number;
  /** The window's timer (default: setTimeout). */
  timer?: WindowTimer;
  /** CallOptions of the stream (default: no deadline, the stream is long-lived). */
  callOptions?: CallOptions;
}

/** The method a MessageStream calls. */
export type StreamMessagesClient = Pick<Client<typeof ContextService>, "streamMessages">;

interface Send {
  request: AppendRequest;
  resolve(response: AppendMessagesResponse): void;
  reject(err: unknown): void;
}

/** Codes with which the server says the failing request wrote nothing. */
const NOTHING_WRITTEN = new Set([
  Code.InvalidArgument,
  Code.FailedPrecondition,
  Code.Aborted,
  Code.NotFound,
  Code.AlreadyExists,
  Code.OutOfRange,
  Code.ResourceExhausted,
  Code.PermissionDenied,
  Code.Unauthenticated,
]);

/** An async iterable the requests of one StreamMessages call are pushed into. */
class RequestQueue implements AsyncIterable<AppendRequest> {
  #items: AppendRequest[] = [];
  #wake: (() => void) | undefined;
  #ended = false;

  push(request: AppendRequest): void {
    this.#items.push(request);
    this.#wake?.();
  }

  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<AppendRequest> {
    for (;;) {
      const next = this.#items.shift();
      if (next !== undefined) {
        yield next;
      } else if (this.#ended) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.#wake = resolve));
        this.#wake = undefined;
      }
    }
  }
}

function messageCount(request: AppendRequest): number {
  return request.messages?.length ?? 0;
}

/** Whether a send may start a batch others join. */
function canLead(request: AppendRequest): boolean {
  return !request.requestId && request.stateDelta === undefined && messageCount(request) > 0;
}

/** Whether `request` may join a batch led by `head`. */
function canJoin(head: AppendRequest, request: AppendRequest): boolean {
  return (
    canLead(request) &&
    request.expectedLastSeq === undefined &&
    request.sessionId === head.sessionId &&
    (request.view ?? 0) === (head.view ?? 0)
  );
}

/** One written request: its sends, oldest first. */
type Batch = Send[];

function combined(batch: Batch): AppendRequest {
  const head = batch[0]!.request;
  if (batch.length === 1) {
    return head;
  }
  // A lead has no request_id nor state_delta (canLead).
  const request: AppendRequest = {
    sessionId: head.sessionId ?? "",
    view: head.view ?? 0,
    messages: batch.flatMap((s) => s.request.messages ?? []),
  };
  if (head.expectedLastSeq !== undefined) {
    request.expectedLastSeq = head.expectedLastSeq;
  }
  return request;
}

/** The answer of each send of a batch, from the batch's answer. */
function answers(batch: Batch, response: AppendMessagesResponse): AppendMessagesResponse[] {
  if (batch.length === 1) {
    return [response];
  }
  const total = batch.reduce((n, s) => n + messageCount(s.request), 0);
  if (response.messages.length !== total) {
    return batch.map(() => response);
  }
  let offset = 0;
  return batch.map((send, i) => {
    const messages = response.messages.slice(offset, offset + messageCount(send.request));
    offset += messages.length;
    const last = i === batch.length - 1;
    return create(AppendMessagesResponseSchema, {
      messages,
      lastSeq: last ? response.lastSeq : (messages.at(-1)?.seq ?? response.lastSeq),
      contextTokens: response.contextTokens,
    });
  });
}

/** A StreamMessages stream that coalesces sends (see the module comment). */
export class MessageStream {
  readonly #client: StreamMessagesClient;
  readonly #coalesce: boolean;
  readonly #windowMs: number;
  readonly #maxBatch: number;
  readonly #timer: WindowTimer;
  readonly #callOptions: CallOptions;
  #open: Batch = [];
  #openMessages = 0;
  #window: unknown;
  #windowSet = false;
  #inFlight: Batch[] = [];
  #requests: RequestQueue | undefined;
  #reading: Promise<void> | undefined;
  #error: unknown;
  #closed = false;
  readonly #written: number[] = [];

  constructor(client: StreamMessagesClient, opts: MessageStreamOptions = {}) {
    this.#client = client;
    this.#coalesce = opts.coalesce ?? true;
    this.#windowMs = opts.windowMs ?? 2;
    this.#maxBatch = Math.max(1, opts.maxBatchMessages ?? 100);
    this.#timer = opts.timer ?? systemTimer;
    this.#callOptions = { timeoutMs: 0, ...opts.callOptions };
  }

  /** The requests written so far: how many messages each carried, in order. */
  get written(): readonly number[] {
    return [...this.#written];
  }

  /** Appends; resolves with this send's own answer (see the module comment). */
  send(request: AppendRequest): Promise<AppendMessagesResponse> {
    return new Promise<AppendMessagesResponse>((resolve, reject) => {
      if (this.#error !== undefined) {
        reject(this.#error);
        return;
      }
      if (this.#closed) {
        reject(new ConnectError("the message stream is closed", Code.Canceled));
        return;
      }
      this.#add({ request, resolve, reject });
    });
  }

  #add(send: Send): void {
    const head = this.#open[0];
    const count = messageCount(send.request);
    if (head !== undefined && canJoin(head.request, send.request) && this.#openMessages + count <= this.#maxBatch) {
      this.#open.push(send);
      this.#openMessages += count;
    } else {
      this.flush();
      if (!this.#coalesce || !canLead(send.request)) {
        this.#write([send]);
        return;
      }
      this.#open = [send];
      this.#openMessages = count;
      this.#windowSet = true;
      this.#window = this.#timer.set(() => {
        this.#windowSet = false;
        this.flush();
      }, this.#windowMs);
    }
    if (this.#openMessages >= this.#maxBatch) {
      this.flush();
    }
  }

  /** Writes the batch being gathered now, without waiting for the window. */
  flush(): void {
    if (this.#windowSet) {
      this.#timer.clear(this.#window);
      this.#windowSet = false;
    }
    const batch = this.#open;
    this.#open = [];
    this.#openMessages = 0;
    if (batch.length > 0) {
      this.#write(batch);
    }
  }

  #write(batch: Batch): void {
    if (this.#requests === undefined) {
      const requests = new RequestQueue();
      this.#requests = requests;
      this.#reading = this.#read(requests);
    }
    this.#inFlight.push(batch);
    this.#written.push(batch.reduce((n, s) => n + messageCount(s.request), 0));
    this.#requests.push(combined(batch));
  }

  async #read(requests: RequestQueue): Promise<void> {
    try {
      for await (const response of this.#client.streamMessages(requests, this.#callOptions)) {
        const batch = this.#inFlight.shift();
        if (batch === undefined) {
          throw new ConnectError("StreamMessages sent a response with no request outstanding", Code.Internal);
        }
        answers(batch, response).forEach((answer, i) => batch[i]!.resolve(answer));
      }
      if (this.#inFlight.length > 0) {
        throw new ConnectError(`StreamMessages ended with ${this.#inFlight.length} request(s) unanswered`, Code.Internal);
      }
    } catch (err) {
      this.#failed(requests, ConnectError.from(err));
    }
  }

  /** The stream failed at its oldest unanswered request (see the module comment). */
  #failed(requests: RequestQueue, err: ConnectError): void {
    requests.end();
    if (this.#requests === requests) {
      this.#requests = undefined;
    }
    const unanswered = this.#inFlight.splice(0);
    const culprit = unanswered[0];
    if (culprit !== undefined && culprit.length > 1 && NOTHING_WRITTEN.has(err.code) && this.#error === undefined) {
      // Nothing of the coalesced request was written: send it again one by one.
      for (const send of unanswered.flat()) {
        this.#write([send]);
      }
      return;
    }
    this.#error = err;
    const open = this.#open;
    this.#open = [];
    this.#openMessages = 0;
    if (this.#windowSet) {
      this.#timer.clear(this.#window);
      this.#windowSet = false;
    }
    for (const send of [...unanswered.flat(), ...open]) {
      send.reject(err);
    }
  }

  /** Sends what is gathered, ends the stream and waits for every answer. */
  async close(): Promise<void> {
    this.flush();
    this.#closed = true;
    // A replay after a failed coalesced request starts a new call: wait for it too.
    while (this.#reading !== undefined) {
      const reading = this.#reading;
      this.#requests?.end();
      await reading;
      if (this.#reading === reading) {
        this.#reading = undefined;
      }
    }
  }
}

/** A coalescing StreamMessages helper over `client` (see MessageStream). */
export function openMessageStream(client: StreamMessagesClient, opts: MessageStreamOptions = {}): MessageStream {
  return new MessageStream(client, opts);
}
