// modelOutputJson and sseDataJson, without a server: fetch Responses built
// here, with bodies cut into chunks at every byte.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ProviderResponseError, isEventStream, modelOutputJson, sseDataJson } from "../src/index.js";

const SSE = "text/event-stream; charset=utf-8";

/** A Response whose body arrives in the given chunks. */
function response(chunks: Uint8Array[], headers: Record<string, string>, status = 200): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) {
        controller.enqueue(c);
      }
      controller.close();
    },
  });
  return new Response(body, { status, headers });
}

// Every way the format allows to write the same three payloads, plus what must be skipped.
const STREAM =
  "\uFEFF: a comment\r\n" +
  "event: message_start\r\n" +
  'data: {"type":"message_start","text":"caf\u00e9 \u2014 \u{1F600}"}\r\n' +
  "\r\n" +
  "event: ping\n" +
  "id: 7\n" +
  "retry: 1000\n" +
  'data:{"type":"ping"}\n' +
  "\n" +
  "event: content_block_delta\r" +
  'data: {"type":"content_block_delta",\r' +
  'data: "delta":{"partial_json":"{\\"a\\": 1"}}\r' +
  "\r" +
  "event: empty\n" +
  "data:\n" +
  "\n" +
  "data: [DONE]\n" +
  "\n" +
  'data: {"type":"never ended"}\n';

const EXPECTED = [
  { type: "message_start", text: "caf\u00e9 \u2014 \u{1F600}" },
  { type: "ping" },
  { type: "content_block_delta", delta: { partial_json: '{"a": 1' } },
];

test("modelOutputJson: the data payloads of an event stream, cut at every byte", async () => {
  const bytes = new TextEncoder().encode(STREAM);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const chunks = [bytes.subarray(0, cut), bytes.subarray(cut)];
    const seen: unknown[] = [];
    const json = await modelOutputJson(response(chunks, { "content-type": SSE }), { onEvent: (d) => seen.push(d) });
    assert.deepEqual(JSON.parse(json), EXPECTED, `cut at byte ${cut}`);
    assert.deepEqual(seen, EXPECTED);
  }
  const oneByteChunks = Array.from(bytes, (b) => new Uint8Array([b]));
  assert.deepEqual(JSON.parse(await modelOutputJson(response(oneByteChunks, { "content-type": SSE }))), EXPECTED);
  assert.deepEqual(JSON.parse(sseDataJson(STREAM)), EXPECTED);
});

test("modelOutputJson keeps each payload as the provider wrote it", async () => {
  const text = 'data: {"n": 12345678901234567890, "s":"\\u00e9"}\n\ndata: {"n":1}\n\n';
  const json = await modelOutputJson(response([new TextEncoder().encode(text)], { "content-type": "text/event-stream" }));
  assert.equal(json, '[{"n": 12345678901234567890, "s":"\\u00e9"},{"n":1}]');
  assert.equal(sseDataJson(""), "[]");
});

test("modelOutputJson: a plain body is returned as it is", async () => {
  const body = '{"type":"message","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}';
  const res = new Response(body, { headers: { "content-type": "application/json" } });
  assert.equal(isEventStream(res), false);
  let events = 0;
  assert.equal(await modelOutputJson(res, { onEvent: () => events++ }), body);
  assert.equal(events, 0);
  assert.equal(isEventStream(new Response("", { headers: { "content-type": "Text/Event-Stream;charset=utf-8" } })), true);
});

test("modelOutputJson: an HTTP error rejects with its ProviderError", async () => {
  const body = '{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}';
  const res = new Response(body, {
    status: 429,
    headers: { "content-type": "application/json", "Retry-After": "3", "anthropic-ratelimit-requests-reset": "soon" },
  });
  const err = await modelOutputJson(res).then(
    () => assert.fail("HTTP 429 resolved"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ProviderResponseError);
  assert.equal(err.status, 429);
  assert.equal(err.providerError.httpStatus, 429);
  assert.equal(err.providerError.body, body);
  assert.equal(err.providerError.headers["retry-after"], "3");
  assert.equal(err.providerError.headers["anthropic-ratelimit-requests-reset"], "soon");
  assert.match(err.message, /HTTP 429: .*rate_limit_error/);
});

test("modelOutputJson: event data that is not JSON rejects", async () => {
  const text = 'data: {"type":"ping"}\n\ndata: {"type": oops}\n\n';
  await assert.rejects(
    modelOutputJson(response([new TextEncoder().encode(text)], { "content-type": SSE })),
    /event 2 of the stream has data that is not JSON: \{"type": oops\}/,
  );
  assert.throws(() => sseDataJson(text), /event 2 of the stream/);
});
