/**
 * Incremental BuildModelInput: keep the last complete ModelInput of recently
 * used sessions, send its resume_token, and put the held messages back in
 * front of the ones the server sends (or the held rendered_json's prefix in
 * front of the rendered rest).
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
 * sends only what the client does not hold yet. Native inputs (and view FULL)
 * come back with `ModelInput.messages_offset`: how many held messages to keep
 * in front of the ones sent. Rendered inputs (a provider `format`, view
 * BASIC) come back with `ModelInput.rendered_prefix_bytes`: how many bytes
 * (UTF-8) of the held `rendered_json` to keep in front of the `rendered_json`
 * sent. `build()` always returns the complete input (`messagesOffset` and
 * `renderedPrefixBytes` 0), equal to what a plain `buildModelInput` would have
 * returned. The returned input is
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
   * more messages, or more rendered bytes, than this cache holds.
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
   * `messagesOffset` held messages, then the received ones; the first
   * `renderedPrefixBytes` bytes (UTF-8) of the held `renderedJson`, then the
   * received one; every other field as received; both offsets 0. Holds and
   * returns the result. Throws (and drops the held input) if an offset goes
   * past what is held: more messages than the held input has, more bytes than
   * its rendered_json has, or a cut inside a UTF-8 character.
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
    const prefixBytes = received.renderedPrefixBytes;
    if (prefixBytes !== 0n) {
      // A byte offset into the UTF-8 encoding of the held rendered_json, not
      // an index into the (UTF-16) JavaScript string.
      const heldBytes = Buffer.from(held?.renderedJson ?? "", "utf8");
      const problem = renderedPrefixProblem(held === undefined ? undefined : heldBytes, prefixBytes);
      if (problem !== undefined) {
        this.#inputs.delete(sessionId);
        throw new Error(
          `BuildModelInput of session ${JSON.stringify(sessionId)} answered with rendered_prefix_bytes ${prefixBytes}, ` +
            `but ${problem}; the held input was dropped, the next call fetches the whole input`,
        );
      }
      received.renderedJson = heldBytes.subarray(0, Number(prefixBytes)).toString("utf8") + received.renderedJson;
      received.renderedPrefixBytes = 0n;
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

/** Why `prefixBytes` cannot cut the held rendered_json (undefined: it can). */
function renderedPrefixProblem(heldBytes: Buffer | undefined, prefixBytes: bigint): string | undefined {
  if (heldBytes === undefined) {
    return "the client holds no input for it";
  }
  if (prefixBytes < 0n || prefixBytes > BigInt(heldBytes.length)) {
    return `the held rendered_json has ${heldBytes.length} byte(s)`;
  }
  const next = heldBytes[Number(prefixBytes)];
  if (next !== undefined && isContinuationByte(next)) {
    return "that offset falls inside a UTF-8 character of the held rendered_json";
  }
  return undefined;
}

/** Whether `byte` continues a UTF-8 sequence (0b10xxxxxx) rather than starting a character. */
function isContinuationByte(byte: number): boolean {
  return (byte & 0xc0) === 0x80;
}
