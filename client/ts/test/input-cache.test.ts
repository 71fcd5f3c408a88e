// InputCache: incremental BuildModelInput against a real ctxwarden server
// (the merged input must equal a plain full BuildModelInput), plus the
// merge, error and LRU rules with a stand-in client.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { equals, toBinary } from "@bufbuild/protobuf";

import {
  BuildModelInputRequestSchema,
  INPUT_CACHE_SESSIONS,
  InputCache,
  ModelInputFormat,
  ModelInputView,
  ModelInputSchema,
  assistant,
  create,
  createClient,
  toolCall,
  toolDefinition,
  toolResult,
  user,
  type BuildModelInputClient,
  type BuildModelInputRequest,
  type CtxwardenClient,
  type Message,
  type ModelInput,
} from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

/** A client that records every BuildModelInput request and raw answer. */
function recording(
  client: BuildModelInputClient,
  rewrite: (req: BuildModelInputRequest) => BuildModelInputRequest = (req) => req,
): BuildModelInputClient & { requests: BuildModelInputRequest[]; answers: ModelInput[] } {
  const requests: BuildModelInputRequest[] = [];
  const answers: ModelInput[] = [];
  return {
    requests,
    answers,
    async buildModelInput(request, options) {
      const req = rewrite(create(BuildModelInputRequestSchema, request));
      requests.push(req);
      const answer = await client.buildModelInput(req, options);
      // Keep a copy: InputCache completes the answer object in place.
      answers.push(create(ModelInputSchema, { ...answer, messages: [...answer.messages] }));
      return answer;
    },
  };
}

function assertSameInput(actual: ModelInput, expected: ModelInput): void {
  assert.equal(actual.messagesOffset, 0n);
  assert.equal(actual.messages.length, expected.messages.length);
  assert.ok(equals(ModelInputSchema, actual, expected), "merged input differs from the full input");
  assert.deepEqual(toBinary(ModelInputSchema, actual), toBinary(ModelInputSchema, expected));
}

describe("InputCache against a real ctxwarden server", () => {
  let server: RunningServer;
  let client: CtxwardenClient;

  before(async () => {
    server = await startServer();
    client = createClient(server.target);
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  async function newSession(): Promise<string> {
    const session = await client.createSession({
      session: {
        systemPrompt: "You are a careful coding agent.",
        tools: [toolDefinition("read", "Read a file", { type: "object" })],
      },
    });
    return session.sessionId;
  }

  function turn(i: number): Message[] {
    return [
      user(`question ${i}: what is in file-${i}.txt?`),
      assistant(`Let me look at file-${i}.txt.`, [toolCall(`call-${i}`, "read", { path: `file-${i}.txt` })]),
      toolResult(`call-${i}`, `contents of file ${i}\n`.repeat(3), { toolName: "read" }),
      assistant(`file-${i}.txt holds three lines.`),
    ];
  }

  test("merged inputs equal full inputs, and later answers are resumed", async () => {
    const sessionId = await newSession();
    const rec = recording(client);
    const inputs = new InputCache(rec);

    for (let i = 1; i <= 5; i++) {
      await client.appendMessages({ sessionId, messages: turn(i) });
      const merged = await inputs.build({ sessionId });
      const full = await client.buildModelInput({ sessionId });
      assertSameInput(merged, full);
      assert.equal(merged.messages.length, 4 * i);
      assert.equal(inputs.get(sessionId), merged);
    }

    // The first call had nothing to resume; every later one sent the
    // previous token and received only the 4 new messages.
    assert.equal(rec.requests[0]?.resumeToken, "");
    assert.equal(rec.answers[0]?.messagesOffset, 0n);
    for (let i = 1; i < 5; i++) {
      const req = rec.requests[i]!;
      const answer = rec.answers[i]!;
      assert.notEqual(req.resumeToken, "");
      assert.equal(req.resumeToken, rec.answers[i - 1]!.resumeToken);
      assert.equal(answer.messagesOffset, BigInt(4 * i), `answer ${i}`);
      assert.equal(answer.messages.length, 4, `answer ${i}`);
    }

    // Nothing new: the server resumes everything held and sends no message.
    const again = await inputs.build({ sessionId });
    assertSameInput(again, await client.buildModelInput({ sessionId }));
    assert.equal(rec.answers.at(-1)?.messagesOffset, 20n);
    assert.equal(rec.answers.at(-1)?.messages.length, 0);

    // Other request fields are passed on; rendered_json comes back complete. (With a
    // format, the native messages come back only with view FULL: what a cache merges.)
    await client.appendMessages({ sessionId, messages: turn(6) });
    const asked = { sessionId, format: ModelInputFormat.OPENAI_CHAT, view: ModelInputView.FULL, maxOutputTokens: 1000n };
    const rendered = await inputs.build(asked);
    assert.ok(rec.answers.at(-1)!.messagesOffset > 0n);
    assertSameInput(
      rendered,
      await client.buildModelInput(asked),
    );
    assert.notEqual(rendered.renderedJson, "");
  });

  // Rendered resume: with a provider format (view BASIC) the server sends the
  // rendered_json after the first rendered_prefix_bytes bytes of the held one.
  for (const format of [ModelInputFormat.ANTHROPIC_MESSAGES, ModelInputFormat.OPENAI_CHAT]) {
    test(`an agent loop in ${ModelInputFormat[format]}: every merged rendered_json equals the full one, resumed answers are smaller`, async () => {
      const sessionId = await newSession();
      const rec = recording(client);
      const inputs = new InputCache(rec);
      const steps = [1, 2, 3].flatMap((i) => turn(i));
      // Multi-byte text (2-, 3- and 4-byte characters) in the history.
      steps.push(user("naïve → 🙂 ça va?"), assistant("Très bien 👍, merci €"));
      const encoder = new TextEncoder();
      for (const [i, message] of steps.entries()) {
        await client.appendMessages({ sessionId, messages: [message] });
        const merged = await inputs.build({ sessionId, format });
        const full = await client.buildModelInput({ sessionId, format });
        assert.notEqual(full.renderedJson, "");
        assert.equal(merged.renderedJson, full.renderedJson, `step ${i}: rendered_json differs`);
        assert.deepEqual(encoder.encode(merged.renderedJson), encoder.encode(full.renderedJson));
        assert.equal(merged.renderedPrefixBytes, 0n);
        // Every other field as a plain call has it (the token may differ).
        const [a, b] = [create(ModelInputSchema, { ...merged, resumeToken: "" }), create(ModelInputSchema, { ...full, resumeToken: "" })];
        assert.ok(equals(ModelInputSchema, a, b), `step ${i}: the merged input differs from the full one`);
        assert.notEqual(merged.resumeToken, "", `step ${i}: a rendered input has a resume_token`);
        const answer = rec.answers.at(-1)!;
        const request = rec.requests.at(-1)!;
        if (i === 0) {
          assert.equal(request.resumeToken, "");
          assert.equal(answer.renderedPrefixBytes, 0n);
          continue;
        }
        assert.equal(request.resumeToken, rec.answers.at(-2)!.resumeToken, `step ${i}: the held token was sent`);
        assert.ok(answer.renderedPrefixBytes > 0n, `step ${i}: the answer was not resumed`);
        const sent = encoder.encode(answer.renderedJson).length;
        const whole = encoder.encode(full.renderedJson).length;
        assert.ok(sent < whole, `step ${i}: the resumed answer (${sent} bytes) is not smaller than the whole (${whole})`);
        assert.equal(BigInt(whole - sent), answer.renderedPrefixBytes);
      }
    });
  }

  test("after a rollback the merged input still equals the full input", async () => {
    const sessionId = await newSession();
    const rec = recording(client);
    const inputs = new InputCache(rec);
    await client.appendMessages({ sessionId, messages: [...turn(1), ...turn(2)] });
    await inputs.build({ sessionId });

    await client.rollbackTurn({ sessionId, toSeq: 4n });
    await client.appendMessages({ sessionId, messages: turn(3) });
    const merged = await inputs.build({ sessionId });
    assertSameInput(merged, await client.buildModelInput({ sessionId }));
    assert.ok(rec.answers.at(-1)!.messagesOffset <= 4n);
  });

  test("a garbage token gets the complete input", async () => {
    const sessionId = await newSession();
    await client.appendMessages({ sessionId, messages: [...turn(1), ...turn(2)] });

    // Plain call with a garbage token: complete answer, no error.
    const plain = await client.buildModelInput({ sessionId, resumeToken: "not-a-token" });
    assert.equal(plain.messagesOffset, 0n);
    assertSameInput(plain, await client.buildModelInput({ sessionId }));

    // Through InputCache, with the held token replaced by garbage on the wire.
    const rec = recording(client, (req) => (req.resumeToken === "" ? req : { ...req, resumeToken: "garbage!" }));
    const inputs = new InputCache(rec);
    await inputs.build({ sessionId });
    await client.appendMessages({ sessionId, messages: turn(3) });
    const merged = await inputs.build({ sessionId });
    assert.equal(rec.requests.at(-1)?.resumeToken, "garbage!");
    assert.equal(rec.answers.at(-1)?.messagesOffset, 0n);
    assert.equal(rec.answers.at(-1)?.messages.length, 12);
    assertSameInput(merged, await client.buildModelInput({ sessionId }));
  });

  test("replays are passed through, neither resumed nor held", async () => {
    const sessionId = await newSession();
    await client.appendMessages({ sessionId, messages: [...turn(1), ...turn(2)] });
    const rec = recording(client);
    const inputs = new InputCache(rec);
    const held = await inputs.build({ sessionId });
    const replay = await inputs.build({ sessionId, asOfSeq: 5n });
    assert.equal(rec.requests.at(-1)?.resumeToken, "");
    assert.equal(replay.messages.length, 4);
    assert.equal(inputs.get(sessionId), held);
  });
});

describe("InputCache without a server", () => {
  const messages = (...texts: string[]): Message[] => texts.map((t) => user(t));
  const input = (sessionId: string, token: string, offset: bigint, msgs: Message[]): ModelInput =>
    create(ModelInputSchema, { sessionId, resumeToken: token, messagesOffset: offset, messages: msgs, lastSeq: 9n });

  test("merge keeps the held prefix and takes every other field from the answer", () => {
    const inputs = new InputCache({ buildModelInput: () => Promise.reject(new Error("unused")) });
    inputs.merge("s", input("s", "t1", 0n, messages("a", "b", "c")));
    const merged = inputs.merge("s", create(ModelInputSchema, { ...input("s", "t2", 2n, messages("x")), lastSeq: 12n }));
    assert.deepEqual(
      merged.messages.map((m) => m.content[0]?.block.value),
      messages("a", "b", "x").map((m) => m.content[0]?.block.value),
    );
    assert.equal(merged.messagesOffset, 0n);
    assert.equal(merged.resumeToken, "t2");
    assert.equal(merged.lastSeq, 12n);
  });

  test("an offset larger than what is held is an Error and drops the held input", async () => {
    const answers = [input("s", "t1", 0n, messages("a", "b")), input("s", "t2", 3n, messages("c"))];
    const inputs = new InputCache({ buildModelInput: async () => answers.shift()! });
    await inputs.build({ sessionId: "s" });
    await assert.rejects(inputs.build({ sessionId: "s" }), /messages_offset 3, but the client holds an input of 2 message/);
    assert.equal(inputs.get("s"), undefined);
    assert.throws(() => inputs.merge("other", input("other", "t", 1n, [])), /holds no input/);
  });

  // Rendered resume: rendered_json is what follows the first
  // rendered_prefix_bytes bytes (UTF-8) of the held rendered_json.
  const rendered = (token: string, prefixBytes: bigint, json: string): ModelInput =>
    create(ModelInputSchema, { sessionId: "r", resumeToken: token, renderedPrefixBytes: prefixBytes, renderedJson: json });
  const utf8Length = (text: string): bigint => BigInt(new TextEncoder().encode(text).length);
  // Multi-byte characters before and at the cut: 2-byte é, 3-byte €, 4-byte
  // emoji (a UTF-16 surrogate pair), so string indices and byte offsets differ.
  const firstWhole = '{"messages":[{"role":"user","content":"héllo € 🙂"},{"role":"assistant","content":"ça va 👍"}';
  const firstEnd = '],"tools":[]}';

  test("a rendered answer is spliced at a UTF-8 byte offset of the held rendered_json", async () => {
    const answers = [
      rendered("t1", 0n, firstWhole + firstEnd),
      // Resumes right after the held messages, before `]`: the cut follows 👍.
      rendered("t2", utf8Length(firstWhole), ',{"role":"user","content":"naïve → 🙃"}' + firstEnd),
      // Resumes inside the second message's text, right before the emoji 👍
      // (a cut between "ça va " and the emoji).
      rendered("t3", utf8Length(firstWhole.slice(0, firstWhole.indexOf("👍"))), "😀\"}]}"),
    ];
    const sent: string[] = [];
    const inputs = new InputCache({
      async buildModelInput(req) {
        sent.push(req.resumeToken ?? "");
        return answers.shift()!;
      },
    });
    const request = { sessionId: "r", format: ModelInputFormat.ANTHROPIC_MESSAGES };
    const first = await inputs.build(request);
    assert.equal(first.renderedJson, firstWhole + firstEnd);

    const second = await inputs.build(request);
    const secondWhole = firstWhole + ',{"role":"user","content":"naïve → 🙃"}' + firstEnd;
    assert.equal(second.renderedJson, secondWhole);
    assert.equal(second.renderedPrefixBytes, 0n);
    assert.equal(second.resumeToken, "t2");
    assert.equal(inputs.get("r"), second);
    // The offset counted bytes: as a string index it would have cut elsewhere.
    assert.notEqual(Number(utf8Length(firstWhole)), firstWhole.length);

    const third = await inputs.build(request);
    assert.equal(third.renderedJson, firstWhole.slice(0, firstWhole.indexOf("👍")) + '😀"}]}');
    assert.deepEqual(JSON.parse(third.renderedJson).messages.at(-1), { role: "assistant", content: "ça va 😀" });
    assert.deepEqual(sent, ["", "t1", "t2"]);
  });

  test("rendered_prefix_bytes equal to the held length keeps all of it; both offsets in one answer", () => {
    const inputs = new InputCache({ buildModelInput: () => Promise.reject(new Error("unused")) });
    inputs.merge("r", create(ModelInputSchema, { ...rendered("t1", 0n, "{€}"), messages: messages("a", "b") }));
    const merged = inputs.merge(
      "r",
      create(ModelInputSchema, { ...rendered("t2", 5n, ""), messagesOffset: 2n, messages: messages("c") }),
    );
    assert.equal(merged.renderedJson, "{€}");
    assert.equal(merged.messages.length, 3);
    assert.equal(merged.messagesOffset, 0n);
    assert.equal(merged.renderedPrefixBytes, 0n);
  });

  test("a rendered offset the held input cannot complete is an Error and drops the held input", async () => {
    const held = "{\"system\":\"é\"}"; // 15 bytes, 14 UTF-16 units
    const cases: [bigint, RegExp][] = [
      [utf8Length(held) + 1n, /rendered_prefix_bytes 16, but the held rendered_json has 15 byte\(s\)/],
      [-1n, /rendered_prefix_bytes -1, but the held rendered_json has 15 byte/],
      // Byte 12 is the second byte of é.
      [12n, /rendered_prefix_bytes 12, but that offset falls inside a UTF-8 character/],
    ];
    for (const [offset, error] of cases) {
      const answers = [rendered("t1", 0n, held), rendered("t2", offset, "]}")];
      const inputs = new InputCache({ buildModelInput: async () => answers.shift()! });
      await inputs.build({ sessionId: "r" });
      await assert.rejects(inputs.build({ sessionId: "r" }), error);
      assert.equal(inputs.get("r"), undefined, `offset ${offset}: the held input is dropped`);
      assert.equal(inputs.size, 0);
    }
    // Nothing held at all.
    const inputs = new InputCache({ buildModelInput: async () => rendered("t", 3n, "}") });
    await assert.rejects(inputs.build({ sessionId: "r" }), /rendered_prefix_bytes 3, but the client holds no input for it/);
    assert.throws(() => inputs.merge("other", rendered("t", 1n, "")), /holds no input/);
    // The exact length of the held rendered_json is fine.
    const whole = new InputCache({ buildModelInput: () => Promise.reject(new Error("unused")) });
    whole.merge("r", rendered("t1", 0n, held));
    assert.equal(whole.merge("r", rendered("t2", utf8Length(held), "")).renderedJson, held);
  });

  test("holds at most `capacity` sessions, dropping the least recently used", async () => {
    assert.equal(new InputCache({ buildModelInput: async () => input("", "", 0n, []) }).capacity, INPUT_CACHE_SESSIONS);
    const sent: string[] = [];
    const inputs = new InputCache(
      {
        async buildModelInput(req) {
          sent.push(req.resumeToken ?? "");
          return input(req.sessionId ?? "", `token-${req.sessionId}`, 0n, []);
        },
      },
      { capacity: 2 },
    );
    await inputs.build({ sessionId: "a" });
    await inputs.build({ sessionId: "b" });
    await inputs.build({ sessionId: "a" }); // a is now the most recent
    await inputs.build({ sessionId: "c" }); // drops b
    assert.deepEqual(inputs.sessionIds(), ["a", "c"]);
    assert.deepEqual(sent, ["", "", "token-a", ""]);
    await inputs.build({ sessionId: "b" });
    assert.equal(sent.at(-1), "");
    assert.deepEqual(inputs.sessionIds(), ["c", "b"]);
    inputs.forget("c");
    assert.equal(inputs.size, 1);
    assert.throws(() => new InputCache({ buildModelInput: async () => input("", "", 0n, []) }, { capacity: 0 }), RangeError);
  });
});
