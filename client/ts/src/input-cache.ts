/**
 * Incremental BuildModelInput: keep the last complete ModelInput of recently
 * used sessions, send its resume_token, and put the held messages back in
 * front of the ones the server sends.
 *
 *     const inputs = new InputCache(client);
 *     const input = await inputs.build({ sessionId });   // always complete
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CallOptions, Client } from "@connectrpc/connect";

import type {
  BuildModelInputRequestSchema,
  ContextService,
  ModelInput,
} from "./gen/ctxwarden/v1/context_service_pb.js";

/** How many sessions an InputCache holds by default. */
export const INPUT_CACHE_SESSIONS = 64;

/** A BuildModelInputRequest, as a message or a plain object of its fields. */
export type BuildModelInputRequestInit = MessageInitShape<typeof BuildModelInputRequestSchema>;

/** What InputCache needs of a client: its buildModelInput method. */
export type BuildModelInputClient = Pick<Client<typeof ContextService>, "buildModelInput">;

export interface InputCacheOptions {
  /** Sessions held at most (default 64); the least recently used is dropped first. */
  capacity?: number;
}

/**
 * The last complete model input of up to `capacity` sessions, for
 * incremental BuildModelInput.
 *
 * `build()` fills `resume_token` with the held input's token; the server then
 * sends only the messages the client does not hold yet and
 * `ModelInput.messages_offset` says how many held messages to keep in front.
 * `build()` always returns the complete input (`messagesOffset` 0), equal to
 * what a plain `buildModelInput` would have returned. The returned input is
 * also the one held for the session, and the next input may share its Message
 * objects: treat it as read-only (copy it with `clone(ModelInputSchema, input)`
 * from `@bufbuild/protobuf` before changing it).
 *
 * Replays (`asOfSeq` set) go straight to the server and are neither resumed
 * nor held.
 */
export class InputCache {
  readonly capacity: number;
  readonly #client: BuildModelInputClient;
  // Insertion order = recency: the first key is the least recently used.
  readonly #inputs = new Map<string, ModelInput>();

  constructor(client: BuildModelInputClient, opts: InputCacheOptions = {}) {
    const capacity = opts.capacity ?? INPUT_CACHE_SESSIONS;
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`InputCache capacity must be a positive integer, got ${capacity}`);
    }
    this.capacity = capacity;
    this.#client = client;
  }

  /**
   * BuildModelInput with the held input's resume_token; returns the complete
   * input and holds it for the next call. Rejects like `buildModelInput`, and
   * with an Error (the session then held no more) when the server resumed
   * more messages than this cache holds.
   */
  async build(request: BuildModelInputRequestInit, options?: CallOptions): Promise<ModelInput> {
    const sessionId = request.sessionId ?? "";
    if (request.asOfSeq !== undefined) {
      return await this.#client.buildModelInput(request, options);
    }
    // Merge against the input whose token was sent, even if a concurrent
    // call for the same session replaced it in the meantime.
    const held = this.#inputs.get(sessionId);
    const received = await this.#client.buildModelInput(
      { ...request, resumeToken: held?.resumeToken ?? "" },
      options,
    );
    return this.merge(sessionId, received, held);
  }

  /**
   * Completes `received` (an answer to a request that carried the resume
   * token of `held`, by default the input held for `sessionId`): the first
   * `messagesOffset` held messages, then the received ones; every other field
   * as received; `messagesOffset` 0. Holds and returns the result. Throws if
   * the offset is larger than the held input's message count.
   */
  merge(sessionId: string, received: ModelInput, held: ModelInput | undefined = this.#inputs.get(sessionId)): ModelInput {
    const offset = received.messagesOffset;
    if (offset !== 0n) {
      const heldCount = held?.messages.length ?? 0;
      if (held === undefined || offset < 0n || offset > BigInt(heldCount)) {
        this.#inputs.delete(sessionId);
        throw new Error(
          `BuildModelInput of session ${JSON.stringify(sessionId)} answered with messages_offset ${offset}, ` +
            `but the client holds ${held === undefined ? "no input" : `an input of ${heldCount} message(s)`} ` +
            `for it; the held input was dropped, the next call fetches the whole input`,
        );
      }
      received.messages = held.messages.slice(0, Number(offset)).concat(received.messages);
      received.messagesOffset = 0n;
    }
    this.#inputs.delete(sessionId);
    this.#inputs.set(sessionId, received);
    while (this.#inputs.size > this.capacity) {
      const oldest = this.#inputs.keys().next().value as string;
      this.#inputs.delete(oldest);
    }
    return received;
  }

  /** The input held for `sessionId`, if any (does not count as a use). */
  get(sessionId: string): ModelInput | undefined {
    return this.#inputs.get(sessionId);
  }

  /** Drops the input held for `sessionId` (e.g. after deleting the session). */
  forget(sessionId: string): void {
    this.#inputs.delete(sessionId);
  }

  /** Drops every held input. */
  clear(): void {
    this.#inputs.clear();
  }

  /** How many sessions are held. */
  get size(): number {
    return this.#inputs.size;
  }

  /** The held session ids, least recently used first. */
  sessionIds(): string[] {
    return [...this.#inputs.keys()];
  }
}
