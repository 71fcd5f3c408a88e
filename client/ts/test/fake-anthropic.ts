/**
 * A fake Anthropic Messages API for the tests: a local node:http server that
 * speaks the real wire format. POST /v1/messages answers a `message`, or,
 * when the request says `"stream": true`, the server-sent events Anthropic
 * sends (message_start, ping, content_block_start / _delta / _stop with
 * text_delta, thinking_delta, signature_delta and input_json_delta,
 * message_delta, message_stop).
 *
 * It checks every request the way Anthropic does for what the tool loop
 * uses, and answers HTTP 400 `invalid_request_error` otherwise: roles
 * alternate from a user message, every tool_use is answered by a tool_result
 * at the start of the next user message (and no result answers nothing),
 * thinking blocks carry the signature this server made for exactly that text,
 * and with thinking enabled an assistant message that calls tools begins with
 * its thinking.
 *
 * What it answers depends on the conversation received (the number of
 * assistant messages in it): turn 1 thinks and calls `read` on setup.py,
 * turn 2 thinks and calls `run` with "pytest -q", turn 3 answers in text,
 * quoting both tool results. Every request is recorded.
 */
import { createHash, createHmac } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** Anthropic answers an alias with the dated snapshot it ran. */
export const MODEL_ALIASES: Record<string, string> = { "claude-sonnet-4-5": "claude-sonnet-4-5-20250929" };

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Block = { [key: string]: Json };
type AnthropicMessage = { role: string; content: string | Block[] };

export interface RecordedRequest {
  headers: IncomingMessage["headers"];
  /** The body as received, parsed. */
  body: { [key: string]: Json };
  /** The body's bytes as received. */
  raw: string;
  /** 400 when the request was refused, else 200. */
  status: number;
}

/** The usage each turn reports (message_start, then message_delta's output_tokens). */
export const TURN_USAGE = [
  { input_tokens: 312, output_tokens: 57, cache_creation_input_tokens: 1024, cache_read_input_tokens: 0 },
  { input_tokens: 48, output_tokens: 73, cache_creation_input_tokens: 161, cache_read_input_tokens: 1024 },
  { input_tokens: 39, output_tokens: 29, cache_creation_input_tokens: 142, cache_read_input_tokens: 1185 },
] as const;

export const THINKING = [
  "The user asks what setup.py does. I should read it before answering.",
  "setup.py only calls setup(name='demo'). To say whether the package works, run the tests.",
];
export const TOOL_USE_IDS = ["toolu_01A9p8L2vXq3WcYbT6mK4sJd", "toolu_01Bf7Rk3nZw5HcQe9uPy2LtM"];

export interface FakeAnthropic {
  /** `http://127.0.0.1:PORT` (the API's base URL). */
  baseUrl: string;
  /** Every request received, in order. */
  requests: RecordedRequest[];
  /** The signature this server gives a thinking text. */
  signature(thinking: string): string;
  /** Answer the next request with this HTTP error instead (e.g. 529 overloaded_error). */
  failNext(status: number, body: unknown, headers?: Record<string, string>): void;
  close(): Promise<void>;
}

class Refused extends Error {}

function refuse(message: string): never {
  throw new Refused(message);
}

export async function startFakeAnthropic(): Promise<FakeAnthropic> {
  const requests: RecordedRequest[] = [];
  let failure: { status: number; body: unknown; headers: Record<string, string> } | undefined;
  const key = createHash("sha256").update(`fake-anthropic-${process.pid}-${Date.now()}`).digest();
  // Real signatures are long opaque base64; these are too, and verifiable.
  const signature = (thinking: string): string =>
    Buffer.concat([
      createHmac("sha256", key).update(thinking).digest(),
      createHmac("sha512", key).update(thinking).digest(),
    ]).toString("base64");

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      let record: RecordedRequest | undefined;
      if (failure !== undefined) {
        const { status, body, headers } = failure;
        failure = undefined;
        send(res, status, body, headers);
        return;
      }
      try {
        if (req.method !== "POST" || req.url !== "/v1/messages") {
          send(res, 404, { type: "error", error: { type: "not_found_error", message: `${req.method} ${req.url}` } });
          return;
        }
        const body = JSON.parse(raw) as { [key: string]: Json };
        record = { headers: req.headers, body, raw, status: 200 };
        requests.push(record);
        const message = answer(body, signature);
        if (body["stream"] === true) {
          stream(res, message);
        } else {
          send(res, 200, message);
        }
      } catch (err) {
        if (record !== undefined) {
          record.status = 400;
        }
        const text = err instanceof Refused || err instanceof SyntaxError ? err.message : String(err);
        send(res, 400, { type: "error", error: { type: "invalid_request_error", message: text } });
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests,
    signature,
    failNext: (status, body, headers = {}) => {
      failure = { status, body, headers };
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

let requestCount = 0;

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...headers, "content-type": "application/json", "request-id": `req_fake${++requestCount}` });
  res.end(JSON.stringify(body));
}

function isObject(v: Json | undefined): v is { [key: string]: Json } {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function blocksOf(m: AnthropicMessage): Block[] {
  return typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
}

/** Checks the request as Anthropic would (for what the loop uses), then decides the answer. */
function answer(body: { [key: string]: Json }, signature: (t: string) => string): Block {
  const model = body["model"];
  if (typeof model !== "string" || model === "") refuse("model: Field required");
  if (typeof body["max_tokens"] !== "number") refuse("max_tokens: Field required");
  const thinking = body["thinking"];
  const thinkingOn = isObject(thinking) && thinking["type"] === "enabled";
  if (thinkingOn && !((thinking["budget_tokens"] as number) < (body["max_tokens"] as number))) {
    refuse("`max_tokens` must be greater than `thinking.budget_tokens`");
  }
  const system = body["system"];
  if (system !== undefined && !(Array.isArray(system) && system.every((b) => isObject(b) && b["type"] === "text"))) {
    refuse("system: Input should be a valid list of text blocks");
  }
  const tools = (body["tools"] ?? []) as Block[];
  const toolNames = new Set(tools.map((t) => t["name"]));
  for (const [i, t] of tools.entries()) {
    if (typeof t["name"] !== "string" || !isObject(t["input_schema"])) refuse(`tools.${i}: name and input_schema required`);
  }

  const messages = body["messages"];
  if (!Array.isArray(messages) || messages.length === 0) refuse("messages: at least one message is required");
  const conv = messages as unknown as AnthropicMessage[];
  let pending: string[] = [];
  for (const [i, m] of conv.entries()) {
    const want = i % 2 === 0 ? "user" : "assistant";
    if (m.role !== want) refuse(`messages.${i}.role: roles must alternate, starting with user (got ${m.role})`);
    const blocks = blocksOf(m);
    if (blocks.length === 0) refuse(`messages.${i}: all messages must have non-empty content`);
    if (m.role === "user") {
      const results = blocks.filter((b) => b["type"] === "tool_result");
      const leading = blocks.slice(0, results.length);
      if (leading.some((b) => b["type"] !== "tool_result")) {
        refuse(`messages.${i}: tool_result blocks must come first in the user message`);
      }
      const ids = results.map((b) => b["tool_use_id"]);
      for (const id of pending) {
        if (!ids.includes(id)) {
          refuse(`messages.${i}: tool_use ids were found without tool_result blocks immediately after: ${id}`);
        }
      }
      for (const id of ids) {
        if (!pending.includes(id as string)) {
          refuse(`messages.${i}: unexpected tool_use_id found in tool_result blocks: ${id}`);
        }
      }
      pending = [];
    } else {
      const calls = blocks.filter((b) => b["type"] === "tool_use");
      for (const [j, b] of blocks.entries()) {
        const at = `messages.${i}.content.${j}`;
        if (b["type"] === "thinking") {
          if (typeof b["signature"] !== "string" || b["signature"] !== signature(String(b["thinking"]))) {
            refuse(`${at}: Invalid \`signature\` in \`thinking\` block`);
          }
        } else if (b["type"] === "tool_use") {
          if (!/^[a-zA-Z0-9_-]+$/.test(String(b["id"]))) refuse(`${at}.id: String should match pattern`);
          if (!toolNames.has(b["name"] as string)) refuse(`${at}: tool ${String(b["name"])} is not defined`);
          if (!isObject(b["input"])) refuse(`${at}.input: Input should be a valid dictionary`);
        } else if (b["type"] === "text") {
          if (b["text"] === "") refuse(`${at}: text content blocks must be non-empty`);
        } else {
          refuse(`${at}.type: unexpected block type ${String(b["type"])}`);
        }
      }
      const first = String(blocks[0]?.["type"]);
      if (thinkingOn && calls.length > 0 && first !== "thinking" && first !== "redacted_thinking") {
        refuse(
          `messages.${i}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${first}\`. ` +
            "When `thinking` is enabled, a final `assistant` message must start with a thinking block.",
        );
      }
      pending = calls.map((b) => String(b["id"]));
    }
  }
  if (conv[conv.length - 1]?.role !== "user") refuse("the last message must be a user message");

  const turn = conv.filter((m) => m.role === "assistant").length;
  const usage = TURN_USAGE[turn];
  if (usage === undefined) refuse(`no scripted answer after ${turn} assistant messages`);
  const base = {
    id: `msg_fake${turn + 1}`,
    type: "message",
    role: "assistant",
    model: MODEL_ALIASES[model] ?? model,
    stop_sequence: null,
    usage: { ...usage },
  };
  const think = (text: string): Block[] =>
    thinkingOn ? [{ type: "thinking", thinking: text, signature: signature(text) }] : [];
  if (turn === 0) {
    return {
      ...base,
      content: [...think(THINKING[0]!), { type: "tool_use", id: TOOL_USE_IDS[0]!, name: "read", input: { path: "setup.py" } }],
      stop_reason: "tool_use",
    };
  }
  if (turn === 1) {
    return {
      ...base,
      content: [
        ...think(THINKING[1]!),
        { type: "tool_use", id: TOOL_USE_IDS[1]!, name: "run", input: { command: "pytest -q", timeout_s: 120 } },
      ],
      stop_reason: "tool_use",
    };
  }
  // The answer quotes what the tools returned, as this request carried it.
  const results = conv.flatMap((m) => (m.role === "user" ? blocksOf(m) : [])).filter((b) => b["type"] === "tool_result");
  const quoted = results.map((b) => {
    const c = b["content"];
    return typeof c === "string" ? c : (c as Block[]).map((x) => x["text"]).join("");
  });
  return {
    ...base,
    content: [
      {
        type: "text",
        text:
          `setup.py declares one package — 'demo' (${JSON.stringify(quoted[0]?.split("\n")[1] ?? "")}), ` +
          `and the tests pass: ${quoted[1] ?? "?"}.`,
      },
    ],
    stop_reason: "end_turn",
  };
}

/** Splits `text` into pieces of at most `n` characters (at least one piece). */
function pieces(text: string, n: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += n) out.push(text.slice(i, i + n));
  return out.length > 0 ? out : [""];
}

/** The events Anthropic streams for `message`, written in small chunks. */
function stream(res: ServerResponse, message: Block): void {
  const events: [string, Json][] = [];
  const usage = message["usage"] as { [key: string]: Json };
  events.push([
    "message_start",
    {
      type: "message_start",
      message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } },
    },
  ]);
  events.push(["ping", { type: "ping" }]);
  for (const [index, block] of (message["content"] as Block[]).entries()) {
    const delta = (d: Json): void => {
      events.push(["content_block_delta", { type: "content_block_delta", index, delta: d }]);
    };
    const start = (shell: Json): void => {
      events.push(["content_block_start", { type: "content_block_start", index, content_block: shell }]);
    };
    if (block["type"] === "thinking") {
      start({ type: "thinking", thinking: "", signature: "" });
      for (const p of pieces(String(block["thinking"]), 17)) delta({ type: "thinking_delta", thinking: p });
      delta({ type: "signature_delta", signature: block["signature"] as string });
    } else if (block["type"] === "text") {
      start({ type: "text", text: "" });
      for (const p of pieces(String(block["text"]), 11)) delta({ type: "text_delta", text: p });
    } else {
      start({ type: "tool_use", id: block["id"]!, name: block["name"]!, input: {} });
      delta({ type: "input_json_delta", partial_json: "" });
      for (const p of pieces(JSON.stringify(block["input"]), 5)) delta({ type: "input_json_delta", partial_json: p });
    }
    events.push(["content_block_stop", { type: "content_block_stop", index }]);
  }
  events.push([
    "message_delta",
    {
      type: "message_delta",
      delta: { stop_reason: message["stop_reason"]!, stop_sequence: null },
      usage: { output_tokens: usage["output_tokens"]! },
    },
  ]);
  events.push(["message_stop", { type: "message_stop" }]);

  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "request-id": `req_fake${++requestCount}`,
  });
  const text = events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join("");
  // Chunks of 97 bytes cut lines and events apart; one more cut splits the
  // first multi-byte character (the answer's "—") in two.
  const bytes = Buffer.from(text, "utf8");
  const multiByte = bytes.findIndex((b) => b >= 0x80);
  const cuts = new Set<number>();
  for (let i = 97; i < bytes.length; i += 97) {
    cuts.add(i);
  }
  if (multiByte >= 0) {
    cuts.add(multiByte + 1);
  }
  const ends = [...cuts].sort((a, b) => a - b).concat(bytes.length);
  let offset = 0;
  const writeNext = (): void => {
    const end = ends.shift();
    if (end === undefined) {
      res.end();
      return;
    }
    res.write(bytes.subarray(offset, end));
    offset = end;
    setImmediate(writeNext);
  };
  writeNext();
}
