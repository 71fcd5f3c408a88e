// MessageStream (StreamMessages with client-side coalescing) against a real
// ctxwarden server. The window's timer is injected: a test fires it when it
// wants the batch to go, so nothing waits on wall-clock time. An interceptor
// records what went over the wire: the message count of every request of
// every StreamMessages call.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Code,
  ConnectError,
  MessageView,
  createClient,
  errorReason,
  messageText,
  Role,
  openMessageStream,
  user,
  type AppendMessagesResponse,
  type CtxwardenClient,
  type Interceptor,
  type MessageStreamOptions,
  type WindowTimer,
} from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

/** A WindowTimer that runs its callbacks only when the test calls fire(). */
class ManualTimer implements WindowTimer {
  readonly pending = new Map<number, () => void>();
  #next = 1;
  set(callback: () => void): number {
    const id = this.#next++;
    this.pending.set(id, callback);
    return id;
  }
  clear(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  fire(): void {
    const callbacks = [...this.pending.values()];
    this.pending.clear();
    callbacks.forEach((callback) => callback());
  }
}

type Outcome = { ok: true; seqs: bigint[]; lastSeq: bigint; texts: string[] } | { ok: false; code: Code; reason: string | undefined };

async function outcome(sent: Promise<AppendMessagesResponse>): Promise<Outcome> {
  try {
    const r = await sent;
    return { ok: true, seqs: r.messages.map((m) => m.seq), lastSeq: r.lastSeq, texts: r.messages.map(messageText) };
  } catch (err) {
    assert.ok(err instanceof ConnectError, String(err));
    return { ok: false, code: err.code, reason: errorReason(err) };
  }
}

describe("MessageStream against a real ctxwarden server", () => {
  let server: RunningServer;
  let client: CtxwardenClient;
  /** Per StreamMessages call, the message count of each request sent. */
  let wire: number[][] = [];
  let sessions = 0;

  const tap: Interceptor = (next) => async (req) => {
    if (!req.stream || req.method.name !== "StreamMessages") {
      return await next(req);
    }
    const sizes: number[] = [];
    wire.push(sizes);
    const source = req.message as AsyncIterable<{ messages: unknown[] }>;
    async function* tapped(): AsyncGenerator<{ messages: unknown[] }> {
      for await (const request of source) {
        sizes.push(request.messages.length);
        yield request;
      }
    }
    return await next({ ...req, message: tapped() as typeof req.message });
  };

  before(async () => {
    server = await startServer();
    client = createClient(server.target, { interceptors: [tap] });
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  async function newSession(): Promise<string> {
    const { sessionId } = await client.createSession({ sessionId: `stream-${++sessions}` });
    wire = [];
    return sessionId;
  }

  function stream(opts: Omit<MessageStreamOptions, "timer"> = {}): { s: ReturnType<typeof openMessageStream>; timer: ManualTimer } {
    const timer = new ManualTimer();
    return { s: openMessageStream(client, { ...opts, timer }), timer };
  }

  test("sends within the window go as one request; each send gets its own answer, in order", async () => {
    const sessionId = await newSession();
    const { s, timer } = stream();
    const sent = [
      s.send({ sessionId, messages: [user("m1")] }),
      s.send({ sessionId, messages: [user("m2"), user("m3")] }),
      s.send({ sessionId, messages: [user("m4")] }),
    ];
    assert.equal(timer.pending.size, 1, "one window for the batch");
    assert.deepEqual(s.written, [], "nothing is written before the window ends");
    timer.fire();
    const answers = await Promise.all(sent.map(outcome));
    await s.close();
    assert.deepEqual(wire, [[4]]);
    assert.deepEqual(answers, [
      { ok: true, seqs: [1n], lastSeq: 1n, texts: ["m1"] },
      { ok: true, seqs: [2n, 3n], lastSeq: 3n, texts: ["m2", "m3"] },
      { ok: true, seqs: [4n], lastSeq: 4n, texts: ["m4"] },
    ]);
    const listed = await client.listMessages({ sessionId });
    assert.deepEqual(listed.messages.map(messageText), ["m1", "m2", "m3", "m4"]);
  });

  test("coalesce: false sends each request as it comes", async () => {
    const sessionId = await newSession();
    const { s, timer } = stream({ coalesce: false });
    const answers = await Promise.all([1, 2, 3].map((i) => outcome(s.send({ sessionId, messages: [user(`m${i}`)] }))));
    await s.close();
    assert.equal(timer.pending.size, 0);
    assert.deepEqual(wire, [[1, 1, 1]]);
    assert.deepEqual(answers.map((a) => a.ok && a.lastSeq), [1n, 2n, 3n]);
  });

  test("a batch goes out when it reaches maxBatchMessages; BASIC view keeps seqs", async () => {
    const sessionId = await newSession();
    const { s, timer } = stream({ maxBatchMessages: 2 });
    const basic = MessageView.BASIC;
    const sent = [1, 2, 3].map((i) => s.send({ sessionId, messages: [user(`m${i}`)], view: basic }));
    assert.deepEqual(s.written, [2], "the first two went without the window");
    timer.fire();
    const answers = await Promise.all(sent.map(outcome));
    await s.close();
    assert.deepEqual(wire, [[2, 1]]);
    assert.deepEqual(answers.map((a) => a.ok && a.seqs), [[1n], [2n], [3n]]);
  });

  for (const coalesce of [true, false]) {
    test(`an error in the middle of a batch (coalesce: ${coalesce}): the sends before it succeed, it and later ones fail`, async () => {
      const sessionId = await newSession();
      const { s, timer } = stream({ coalesce });
      const sent = [
        s.send({ sessionId, messages: [user("ok1")] }),
        s.send({ sessionId, messages: [user("ok2")] }),
        // A message without content: INVALID_ARGUMENT (EMPTY_CONTENT).
        s.send({ sessionId, messages: [{ role: Role.USER }] }),
        s.send({ sessionId, messages: [user("after1")] }),
        s.send({ sessionId, messages: [user("after2")] }),
      ];
      timer.fire();
      const answers = await Promise.all(sent.map(outcome));
      await s.close();
      assert.deepEqual(answers.slice(0, 2), [
        { ok: true, seqs: [1n], lastSeq: 1n, texts: ["ok1"] },
        { ok: true, seqs: [2n], lastSeq: 2n, texts: ["ok2"] },
      ]);
      const failed = answers.slice(2);
      assert.deepEqual(failed, [
        { ok: false, code: Code.InvalidArgument, reason: "EMPTY_CONTENT" },
        { ok: false, code: Code.InvalidArgument, reason: "EMPTY_CONTENT" },
        { ok: false, code: Code.InvalidArgument, reason: "EMPTY_CONTENT" },
      ]);
      const listed = await client.listMessages({ sessionId });
      assert.deepEqual(listed.messages.map(messageText), ["ok1", "ok2"]);
      // Coalesced: one request of 5 failed whole, then the same sends one by one on a new stream.
      assert.deepEqual(wire, coalesce ? [[5], [1, 1, 1, 1, 1]] : [[1, 1, 1, 1, 1]]);
      // The stream is over: later sends fail with the same error.
      const later = await outcome(s.send({ sessionId, messages: [user("later")] }));
      assert.ok(!later.ok);
    });
  }

  test("a send with a request_id goes alone and stays idempotent; message IDs coalesce and deduplicate", async () => {
    const sessionId = await newSession();
    const first = stream();
    const sent = [
      first.s.send({ sessionId, messages: [user("a", { messageId: "msg-a" })] }),
      first.s.send({ sessionId, messages: [user("b")], requestId: "req-b" }),
      first.s.send({ sessionId, messages: [user("c", { messageId: "msg-c" })] }),
      first.s.send({ sessionId, messages: [user("d", { messageId: "msg-d" })] }),
    ];
    first.timer.fire();
    const answers = await Promise.all(sent.map(outcome));
    await first.s.close();
    assert.deepEqual(wire, [[1, 1, 2]], "a flushed at b, b alone, then c and d together");
    assert.deepEqual(answers.map((a) => a.ok && a.seqs), [[1n], [2n], [3n], [4n]]);

    // Retried on a new stream: the same answers, nothing stored twice.
    const retry = stream();
    const again = [
      retry.s.send({ sessionId, messages: [user("b")], requestId: "req-b" }),
      retry.s.send({ sessionId, messages: [user("c", { messageId: "msg-c" })] }),
      retry.s.send({ sessionId, messages: [user("d", { messageId: "msg-d" })] }),
    ];
    retry.timer.fire();
    const repeated = await Promise.all(again.map(outcome));
    await retry.s.close();
    assert.deepEqual(repeated.map((a) => a.ok && a.seqs), [[2n], [3n], [4n]]);
    assert.equal((await client.getSession({ sessionId })).lastSeq, 4n);
  });

  test("expected_last_seq leads a new batch; a mismatch fails only its batch's sends", async () => {
    const sessionId = await newSession();
    const { s, timer } = stream();
    const sent = [
      s.send({ sessionId, messages: [user("x1")] }),
      s.send({ sessionId, messages: [user("x2")], expectedLastSeq: 1n }),
      s.send({ sessionId, messages: [user("x3")] }),
    ];
    timer.fire();
    const answers = await Promise.all(sent.map(outcome));
    await s.close();
    assert.deepEqual(wire, [[1, 2]]);
    assert.deepEqual(answers.map((a) => a.ok && a.lastSeq), [1n, 2n, 3n]);

    const stale = stream();
    const late = [
      stale.s.send({ sessionId, messages: [user("y1")], expectedLastSeq: 1n }),
      stale.s.send({ sessionId, messages: [user("y2")] }),
    ];
    stale.timer.fire();
    const failed = await Promise.all(late.map(outcome));
    await stale.s.close();
    assert.deepEqual(failed.map((a) => !a.ok && a.code), [Code.Aborted, Code.Aborted]);
    assert.equal((await client.getSession({ sessionId })).lastSeq, 3n);
  });
});

describe("MessageStream against a server that takes fewer messages per request than a batch", () => {
  let server: RunningServer;
  let client: CtxwardenClient;

  before(async () => {
    server = await startServer(["--max-messages-per-request", "2"]);
    client = createClient(server.target);
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("the refused batch is sent again one by one: every send succeeds, in order", async () => {
    const { sessionId } = await client.createSession({});
    const timer = new ManualTimer();
    const s = openMessageStream(client, { timer });
    const sent = [1, 2, 3].map((i) => s.send({ sessionId, messages: [user(`m${i}`)] }));
    timer.fire();
    const answers = await Promise.all(sent.map(outcome));
    // Later sends coalesce again.
    const more = [4, 5].map((i) => s.send({ sessionId, messages: [user(`m${i}`)] }));
    timer.fire();
    answers.push(...(await Promise.all(more.map(outcome))));
    await s.close();
    assert.deepEqual(s.written, [3, 1, 1, 1, 2]);
    assert.deepEqual(answers.map((a) => a.ok && a.lastSeq), [1n, 2n, 3n, 4n, 5n]);
    const listed = await client.listMessages({ sessionId });
    assert.deepEqual(listed.messages.map(messageText), ["m1", "m2", "m3", "m4", "m5"]);
  });
});
