// End to end: a real ctxwarden server process, the example's agent loop, and
// assertions on what it printed and on the server's state afterwards.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { runExample } from "../examples/agent-loop.js";
import {
  Code,
  ConnectError,
  MessageState,
  RecoveryAction,
  Role,
  assistant,
  badRequest,
  createClient,
  errorReason,
  errorStatus,
  messageText,
  user,
  type CtxwardenClient,
} from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

describe("against a real ctxwarden server", () => {
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

  test("runExample: rollback, agent-side compaction, rebuilt input", async () => {
    const lines: string[] = [];
    const result = await runExample(client, (line) => lines.push(line));
    const output = lines.join("\n");
    console.log(output);

    // What it printed.
    assert.match(output, /^session \S+: 1 message\(s\), \d+ tokens$/m);
    assert.match(output, /^rollback: action=RETRY retry_after=2s rolled_back_seqs=\[4\] /m);
    assert.match(output, /^plan \S+: summarize seqs 1\.\.\d+, keep from \d+/m);
    assert.match(output, /^compaction \S+: \d+ -> \d+ tokens, first_kept_seq=\d+, read_files=\[setup\.py\]$/m);
    assert.match(output, /^tokens: system=\d+ tools=\d+ summary=\d+ messages=\d+ total=\d+ window=\d+ threshold=\d+ estimated=true$/m);
    assert.match(output, new RegExp(`^first_kept_seq=${result.compaction.firstKeptSeq} `, "m"));
    assert.match(output, new RegExp(`^first message: summary=${result.compaction.compactionId} `, "m"));

    // The rollback said: retry after 2 s.
    assert.equal(result.rollback.action, RecoveryAction.RETRY);
    assert.equal(result.rollback.retryAfter?.seconds, 2n);
    assert.equal(result.rollback.retryAfter?.nanos ?? 0, 0);
    assert.deepEqual(result.rollback.rolledBackSeqs, [4n]);

    // Server state: one checkpoint, the rebuilt input starts with its summary.
    const { sessionId } = result;
    const listed = await client.listCompactions({ sessionId });
    assert.equal(listed.compactions.length, 1);
    const [compaction] = listed.compactions;
    assert.equal(compaction?.compactionId, result.compaction.compactionId);
    assert.equal(compaction?.summarizer, "agent");
    assert.equal(compaction?.superseded, false);
    assert.deepEqual(compaction?.readFiles, ["setup.py"]);

    const input = await client.buildModelInput({ sessionId });
    assert.equal(input.compactionId, compaction?.compactionId);
    assert.equal(input.firstKeptSeq, compaction?.firstKeptSeq);
    assert.ok(input.firstKeptSeq > 1n);
    const first = input.messages[0];
    assert.ok(first !== undefined);
    assert.equal(first.role, Role.USER);
    assert.equal(first.metadata["ctxwarden.summary"], compaction?.compactionId);
    assert.match(messageText(first), /compacted into the following summary/);
    assert.match(messageText(first), /<summary>[\s\S]*Read setup\.py/);
    assert.ok((input.tokens?.summaryTokens ?? 0n) > 0n);
    assert.equal(
      input.tokens?.totalTokens,
      (input.tokens?.systemTokens ?? 0n) +
        (input.tokens?.toolsTokens ?? 0n) +
        (input.tokens?.summaryTokens ?? 0n) +
        (input.tokens?.messageTokens ?? 0n),
    );
    // Same state, same bytes.
    assert.deepEqual(await client.buildModelInput({ sessionId }), input);

    // History is never deleted: the failed call is still stored, rolled back.
    const history = await client.listMessages({ sessionId, includeRolledBack: true });
    assert.equal(history.messages.length, 11);
    assert.deepEqual(
      history.messages.filter((m) => m.state === MessageState.ROLLED_BACK).map((m) => m.seq),
      [4n],
    );
    assert.equal(history.messages[3]?.errorMessage, "429 rate limit");
  });

  test("GetSession of an unknown id: NOT_FOUND with reason SESSION_NOT_FOUND", async () => {
    const err = await client.getSession({ sessionId: "no-such-session" }).then(
      () => assert.fail("GetSession of an unknown id succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConnectError, `not a ConnectError: ${String(err)}`);
    assert.equal(err.code, Code.NotFound);
    assert.equal(errorReason(err), "SESSION_NOT_FOUND");
    // Decoded from the grpc-status-details-bin trailer by our own code too.
    const status = errorStatus(err);
    assert.equal(status?.code, Code.NotFound);
    assert.deepEqual(status?.details.map((d) => d.typeUrl), ["type.googleapis.com/google.rpc.ErrorInfo"]);
  });

  test("a malformed session id: INVALID_ARGUMENT with a BadRequest naming the field", async () => {
    const err = await client.createSession({ sessionId: "not valid!" }).then(
      () => assert.fail("CreateSession with a malformed id succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConnectError);
    assert.equal(err.code, Code.InvalidArgument);
    assert.equal(errorReason(err), "INVALID_SESSION_ID");
    assert.deepEqual(badRequest(err)?.fieldViolations.map((v) => v.field), ["session_id"]);
  });

  test("StreamMessages: bidirectional stream, one response per request", async () => {
    const { sessionId } = await client.createSession({});
    async function* requests() {
      for (let i = 0; i < 3; i++) {
        yield { sessionId, messages: [user(`question ${i}`), assistant(`answer ${i}`)] };
      }
    }
    const lastSeqs: bigint[] = [];
    for await (const response of client.streamMessages(requests())) {
      lastSeqs.push(response.lastSeq);
    }
    assert.deepEqual(lastSeqs, [2n, 4n, 6n]);
  });

  test("a per-call deadline overrides the default one", async () => {
    const session = await client.createSession({}, { timeoutMs: 10_000 });
    const got = await client.getSession({ sessionId: session.sessionId }, { timeoutMs: 5_000 });
    assert.equal(got.sessionId, session.sessionId);
  });
});
