/**
 * Moving a model provider's HTTP answer into AppendModelOutput unchanged.
 *
 * `modelOutputJson(response)` turns the fetch `Response` of one model call
 * into AppendModelOutput's `response_json`: the body as the provider returned
 * it, or, for a streamed call (`text/event-stream`), the JSON array of the
 * `data:` payloads of its events, in order. ctxwarden assembles the events the
 * way the provider's SDK does, so the agent never parses them itself.
 */
import { create } from "@bufbuild/protobuf";

import { ProviderErrorSchema, type ProviderError } from "./gen/ctxwarden/v1/context_service_pb.js";

/** A provider call that failed at the HTTP level (status not 2xx). */
export class ProviderResponseError extends Error {
  /** The failure as RollbackTurn takes it: `rollbackTurn({ sessionId, providerError })`. */
  readonly providerError: ProviderError;

  constructor(providerError: ProviderError) {
    super(`the model provider answered HTTP ${providerError.httpStatus}: ${providerError.body.slice(0, 500)}`);
    this.name = "ProviderResponseError";
    this.providerError = providerError;
  }

  /** The HTTP status. */
  get status(): number {
    return this.providerError.httpStatus;
  }
}

export interface ModelOutputOptions {
  /**
   * Called with each streamed event's parsed `data:` payload as it arrives
   * (to show text while the model writes it). Not called for plain bodies.
   */
  onEvent?: (data: unknown) => void;
}

/** Whether a response is a server-sent event stream. */
export function isEventStream(response: Pick<Response, "headers">): boolean {
  const type = response.headers.get("content-type") ?? "";
  return type.split(";")[0]!.trim().toLowerCase() === "text/event-stream";
}

/**
 * AppendModelOutput's `response_json` for a provider's fetch `Response`: the
 * body as returned, or, when it is an event stream, a JSON array of the
 * `data:` payloads of its events (each kept as the provider wrote it; the
 * OpenAI `[DONE]` marker is left out). Rejects with a `ProviderResponseError`
 * when the status is not 2xx, and with an `Error` when an event's data is not
 * JSON. Reads the whole body.
 */
export async function modelOutputJson(response: Response, opts: ModelOutputOptions = {}): Promise<string> {
  if (!response.ok) {
    const headers: Record<string, string> = {};
    response.headers.forEach((value, name) => {
      headers[name] = value;
    });
    throw new ProviderResponseError(
      create(ProviderErrorSchema, { httpStatus: response.status, body: await response.text(), headers }),
    );
  }
  if (!isEventStream(response) || response.body === null) {
    return await response.text();
  }
  const payloads: string[] = [];
  const parser = new SseParser(collector(payloads, opts.onEvent));
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    parser.push(decoder.decode(chunk, { stream: true }));
  }
  parser.push(decoder.decode());
  parser.end();
  return `[${payloads.join(",")}]`;
}

/**
 * The `data:` payloads of a whole server-sent event stream, in order, as a
 * JSON array string (what `modelOutputJson` returns for a stream, for an
 * agent that already holds the text).
 */
export function sseDataJson(text: string): string {
  const payloads: string[] = [];
  const parser = new SseParser(collector(payloads));
  parser.push(text);
  parser.end();
  return `[${payloads.join(",")}]`;
}

/** Keeps each event's data (checked to be JSON), leaving out OpenAI's `[DONE]`. */
function collector(payloads: string[], onEvent?: (data: unknown) => void): (data: string) => void {
  return (data) => {
    if (data === "[DONE]") {
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      throw new Error(`event ${payloads.length + 1} of the stream has data that is not JSON: ${data.slice(0, 200)}`);
    }
    payloads.push(data);
    onEvent?.(parsed);
  };
}

/**
 * The event stream format of the HTML standard, as far as data goes: lines
 * end with CRLF, LF or CR; `data:` lines (one optional space after the colon)
 * are joined with "\n"; a blank line ends an event; comments (`:`) and other
 * fields are ignored; an event not ended by a blank line, or without data, is dropped.
 */
class SseParser {
  private buffer = "";
  private data: string[] = [];
  private started = false;

  constructor(private readonly onData: (data: string) => void) {}

  push(text: string): void {
    this.buffer += text;
    if (!this.started && this.buffer.length > 0) {
      this.started = true;
      if (this.buffer.startsWith("\uFEFF")) {
        this.buffer = this.buffer.slice(1);
      }
    }
    const lineEnd = /\r\n|\n|\r/g;
    let start = 0;
    for (let m = lineEnd.exec(this.buffer); m !== null; m = lineEnd.exec(this.buffer)) {
      // A CR at the very end may be the first half of a CRLF: wait for more.
      if (m[0] === "\r" && m.index === this.buffer.length - 1) {
        break;
      }
      this.line(this.buffer.slice(start, m.index));
      start = m.index + m[0].length;
    }
    this.buffer = this.buffer.slice(start);
  }

  end(): void {
    if (this.buffer.endsWith("\r")) {
      this.line(this.buffer.slice(0, -1));
    }
    this.buffer = "";
    this.data = [];
  }

  private line(line: string): void {
    if (line === "") {
      const data = this.data.join("\n");
      this.data = [];
      if (data !== "") {
        this.onData(data);
      }
      return;
    }
    if (line.startsWith(":")) {
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    if (field !== "data") {
      return;
    }
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) {
      value = value.slice(1);
    }
    this.data.push(value);
  }
}
