// The helpers of @ctxwarden/client that wrap an RPC (InputCache,
// listAllSessions, MessageStream, and the framework adapters CtxwardenSession and
// ctxwardenSteps) can express every field of its request.
//
// The test walks the ContextService descriptor. Every RPC must be classified
// below: wrapped by which helper(s), or called through the generated client
// directly; an RPC the lists do not name (a new one) fails, and so does a
// name that is no longer an RPC. Each helper is then called with a
// non-default value in every request field (once per member of each oneof,
// and with each proto3 `optional` field set and unset) against a recording
// gRPC server on a loopback socket, which must receive those values: a field
// the helper cannot pass on fails, unless the helper's exemption list names it
// and says why the helper owns it.
import assert from "node:assert/strict";
import { createServer, type Http2Server } from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  ScalarType,
  clearField,
  clone,
  create,
  equals,
  isMessage,
  toJsonString,
  type DescField,
  type DescMessage,
  type DescMethod,
  type DescMethodBiDiStreaming,
  type DescMethodUnary,
  type Message,
  type MessageShape,
} from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import { ctxwardenSteps } from "../src/ai-sdk.js";
import { CtxwardenSession } from "../src/openai-agents.js";
import {
  AppendMessagesRequestSchema,
  AppendModelOutputRequestSchema,
  BuildModelInputRequestSchema,
  CreateSessionRequestSchema,
  ContextService,
  InputCache,
  ListSessionsRequestSchema,
  createClient,
  listAllSessions,
  openMessageStream,
  type CtxwardenClient,
} from "../src/index.js";

/** A helper that wraps an RPC, and how to make it send a given request. */
interface Helper {
  /** The helper as a caller names it. */
  name: string;
  /** The RPC it wraps. */
  rpc: string;
  /**
   * Request fields (proto names) the helper sets itself, each with the
   * reason; every other field must reach the server as the caller gave it.
   */
  exempt: Record<string, string>;
  /** Calls the helper so that it sends `request` (every field set). */
  call(client: CtxwardenClient, request: Message): Promise<void>;
  /** What the recording server answers (by RPC) during the call; default: empty responses. */
  answers?: Record<string, MessageInit>;
}

type MessageInit = Record<string, unknown>;

// The reasons shared by the framework adapters.
const NO_KEY = "the framework's interface has no idempotency key (an UNAVAILABLE append is not retried)";
const ADAPTER_READ = "the adapter reads what it needs (the view, the format, no replay), through its InputCache";

/** A BuildModelInput request's fields an adapter sets itself; the rest comes from its options. */
const ADAPTER_BUILD_EXEMPT = {
  format: ADAPTER_READ,
  view: ADAPTER_READ,
  as_of_seq: ADAPTER_READ,
  resume_token: "sent from the held input (InputCache)",
  refresh_memory: "the framework has no moment for it: the memory block is refreshed at compaction",
  report_cache_prefix: "the framework reads no cache report: GetUsage's ledger counts every input either way",
};

/** `message` as a `schema` message (it is one: the test made it from the descriptor). */
function narrow<Desc extends DescMessage>(schema: Desc, message: Message): MessageShape<Desc> {
  assert.ok(isMessage(message, schema), `${message.$typeName} is no ${schema.typeName}`);
  return message;
}

const HELPERS: Helper[] = [
  {
    name: "InputCache.build",
    rpc: "BuildModelInput",
    exempt: {
      // The cache owns the token: it sends the held input's, so that it can
      // complete the answer (messages_offset, rendered_prefix_bytes).
      resume_token: "sent from the held input",
    },
    async call(client, request) {
      await new InputCache(client).build(narrow(BuildModelInputRequestSchema, request));
    },
  },
  {
    // Alone (every field set includes request_id) a send goes out as given;
    // what a coalesced request carries is tested in message-stream.test.ts.
    name: "MessageStream.send",
    rpc: "StreamMessages",
    exempt: {},
    async call(client, request) {
      const stream = openMessageStream(client);
      const sent = stream.send(narrow(AppendMessagesRequestSchema, request));
      stream.flush();
      await sent;
      await stream.close();
    },
  },
  {
    name: "listAllSessions",
    rpc: "ListSessions",
    exempt: {},
    async call(client, request) {
      for await (const _ of listAllSessions(client, narrow(ListSessionsRequestSchema, request))) {
        // The recording server answers with no session and no next page.
      }
    },
  },

  // -- CtxwardenSession (@openai/agents Session): its options and arguments --
  {
    name: "CtxwardenSession.getItems",
    rpc: "BuildModelInput",
    exempt: ADAPTER_BUILD_EXEMPT,
    async call(client, request) {
      const { sessionId, maxOutputTokens, autoCompact } = narrow(BuildModelInputRequestSchema, request);
      await new CtxwardenSession(client, { sessionId, maxOutputTokens, autoCompact }).getItems();
    },
  },
  {
    name: "CtxwardenSession.addItems",
    rpc: "AppendModelOutput",
    exempt: {
      format: "the Agents SDK's items are OpenAI Responses items",
      items_json: "made from addItems' items",
      response_json: "the Agents SDK hands over items, not provider response bodies",
      request_id: NO_KEY,
      expected_last_seq: "Session.addItems appends unconditionally",
      view: "the adapter reads nothing of the answer",
    },
    async call(client, request) {
      const { sessionId } = narrow(AppendModelOutputRequestSchema, request);
      await new CtxwardenSession(client, { sessionId }).addItems([{ role: "user", content: "hi" }]);
    },
  },
  {
    // The session is created from the options: clearSession makes it anew.
    name: "CtxwardenSession.clearSession",
    rpc: "CreateSession",
    exempt: { request_id: NO_KEY },
    async call(client, request) {
      const { sessionId, session } = narrow(CreateSessionRequestSchema, request);
      await new CtxwardenSession(client, { sessionId, ...(session !== undefined ? { session } : {}) }).clearSession();
    },
  },
  {
    name: "CtxwardenSession.clearSession",
    rpc: "DeleteSession",
    exempt: {},
    async call(client, request) {
      await new CtxwardenSession(client, { sessionId: sessionIdOf(request) }).clearSession();
    },
  },
  {
    name: "CtxwardenSession.getSessionId",
    rpc: "GetSession",
    exempt: {},
    async call(client, request) {
      await new CtxwardenSession(client, { sessionId: sessionIdOf(request) }).getSessionId();
    },
  },
  {
    name: "CtxwardenSession.popItem",
    rpc: "ListMessages",
    exempt: {
      page_size: "popItem reads the newest message only",
      page_token: "popItem reads the newest message only",
      newest_first: "popItem reads the newest message only",
      after_seq: "popItem reads the newest message only",
      after_time: "popItem reads the newest message only",
      include_rolled_back: "popItem reads the newest message only",
    },
    answers: { ListMessages: { messages: [{ seq: 5n }] }, GetSession: { lastSeq: 7n } },
    async call(client, request) {
      await new CtxwardenSession(client, { sessionId: sessionIdOf(request) }).popItem();
    },
  },
  {
    name: "CtxwardenSession.popItem",
    rpc: "RollbackTurn",
    exempt: {
      to_seq: "the newest message's seq - 1",
      expected_last_seq: "the session's last_seq (a concurrent append makes the pop fail)",
      error_message: "a pop is no failed turn",
      provider_error: "a pop is no failed turn",
      request_id: NO_KEY,
    },
    answers: { ListMessages: { messages: [{ seq: 5n }] }, GetSession: { lastSeq: 7n } },
    async call(client, request) {
      await new CtxwardenSession(client, { sessionId: sessionIdOf(request) }).popItem();
    },
  },

  // -- ctxwardenSteps (AI SDK prepareStep / onStepFinish) --------------------
  {
    name: "ctxwardenSteps.prepareStep",
    rpc: "BuildModelInput",
    exempt: ADAPTER_BUILD_EXEMPT,
    async call(client, request) {
      const { sessionId, maxOutputTokens, autoCompact } = narrow(BuildModelInputRequestSchema, request);
      await ctxwardenSteps(client, { sessionId, maxOutputTokens, autoCompact }).prepareStep({ stepNumber: 1, messages: [] });
    },
  },
  {
    name: "ctxwardenSteps.onStepFinish",
    rpc: "AppendMessages",
    exempt: {
      messages: "made from the step's response messages (toCtxwardenMessages)",
      request_id: NO_KEY,
      expected_last_seq: "a step's output is appended unconditionally",
      view: "the adapter reads nothing of the answer",
      state_delta: "the AI SDK keeps no session state",
    },
    async call(client, request) {
      await ctxwardenSteps(client, { sessionId: sessionIdOf(request) }).onStepFinish({
        response: { messages: [{ role: "assistant", content: "hello" }] },
      });
    },
  },
];

/** The session_id field of a request (every request wrapped here has one). */
function sessionIdOf(request: Message): string {
  const id = (request as Message & { sessionId?: unknown }).sessionId;
  assert.equal(typeof id, "string", `${request.$typeName} has no session_id`);
  return id as string;
}


/**
 * RPCs no helper wraps: callers use the generated client's method
 * (`client.appendMessages(...)` ...), which takes the request as the
 * descriptor has it, every field included. (The wrapped ones can be called
 * that way too; they are listed with their helpers, not here.)
 */
const DIRECT = new Set([
  "UpdateSession",
  "Compact",
  "PrepareCompaction",
  "CommitCompaction",
  "ListCompactions",
  "GetToolOutput",
  "CountTokens",
  "ForkSession",
  "ArchiveSession",
  "UnarchiveSession",
  "GetUsage",
  "CreateMemory",
  "GetMemory",
  "ListMemories",
  "UpdateMemory",
  "DeleteMemory",
]);

// -- sample values ----------------------------------------------------------------

const INTEGER_64 = new Set([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

function scalarSample(type: ScalarType, field: DescField): unknown {
  switch (type) {
    case ScalarType.STRING:
      return `${field.name}-1`;
    case ScalarType.BOOL:
      return true;
    case ScalarType.BYTES:
      return new Uint8Array([1, 2, 3]);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return 1.5;
    default:
      return INTEGER_64.has(type) ? BigInt(7 + field.number) : 7 + field.number;
  }
}

/** A message of type `desc` with its scalar and enum fields set (one level deep). */
function messageSample(desc: DescMessage): Message {
  const init: Record<string, unknown> = {};
  for (const field of desc.fields) {
    if (field.oneof !== undefined) {
      continue;
    }
    if (field.fieldKind === "scalar") {
      init[field.localName] = scalarSample(field.scalar, field);
    } else if (field.fieldKind === "enum") {
      init[field.localName] = field.enum.values.at(-1)!.number;
    }
  }
  return create(desc, init);
}

/** A non-default value for `field`, as its init shape takes it. */
function sample(field: DescField): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return scalarSample(field.scalar, field);
    case "enum":
      return field.enum.values.at(-1)!.number;
    case "message":
      return messageSample(field.message);
    case "list":
      switch (field.listKind) {
        case "scalar":
          return [scalarSample(field.scalar, field)];
        case "enum":
          return [field.enum.values.at(-1)!.number];
        case "message":
          return [messageSample(field.message)];
      }
      break;
    case "map": {
      const key = String(scalarSample(field.mapKey, field));
      switch (field.mapKind) {
        case "scalar":
          return { [key]: scalarSample(field.scalar, field) };
        case "enum":
          return { [key]: field.enum.values.at(-1)!.number };
        case "message":
          return { [key]: messageSample(field.message) };
      }
    }
  }
  throw new Error(`no sample for ${(field as DescField).toString()}`);
}

/**
 * Requests for `desc` with every field set: one per member of each oneof (the
 * members exclude one another), each proto3 `optional` field set and unset.
 */
function variants(desc: DescMessage): Message[] {
  let inits: Record<string, unknown>[] = [{}];
  const expand = (options: ((init: Record<string, unknown>) => void)[]): void => {
    inits = inits.flatMap((init) =>
      options.map((apply) => {
        const next = { ...init };
        apply(next);
        return next;
      }),
    );
  };
  for (const member of desc.members) {
    if (member.kind === "oneof") {
      expand(member.fields.map((f) => (init) => (init[member.localName] = { case: f.localName, value: sample(f) })));
    } else if (member.proto.proto3Optional === true) {
      expand([(init) => (init[member.localName] = sample(member)), () => undefined]);
    } else {
      expand([(init) => (init[member.localName] = sample(member))]);
    }
  }
  return inits.map((init) => create(desc, init));
}

// -- a gRPC server that records every request --------------------------------------

interface Recorded {
  rpc: string;
  request: Message;
}

interface Recording {
  recorded: Recorded[];
  /** Answers by RPC name; an RPC not named gets an empty response. */
  answers: Record<string, MessageInit>;
}

function recordingRoutes(recording: Recording): (router: ConnectRouter) => void {
  return (router) => {
    for (const method of ContextService.methods) {
      register(router, method, recording);
    }
  };
}

function register(router: ConnectRouter, method: DescMethod, recording: Recording): void {
  const answer = (request: Message): Message => {
    recording.recorded.push({ rpc: method.name, request });
    // By default empty: no next page, nothing resumed, no messages.
    return create(method.output, recording.answers[method.name] ?? {});
  };
  if (isUnary(method)) {
    router.rpc(method, (request) => answer(request));
  } else if (isBiDiStreaming(method)) {
    router.rpc(method, async function* (requests) {
      for await (const request of requests) {
        yield answer(request);
      }
    });
  } else {
    throw new Error(`${method.name}: a ${method.methodKind} RPC; teach the recording server about it`);
  }
}

// (DescMethod's methodKind does not discriminate its variants by itself.)
function isUnary(method: DescMethod): method is DescMethodUnary<DescMessage, DescMessage> {
  return method.methodKind === "unary";
}

function isBiDiStreaming(method: DescMethod): method is DescMethodBiDiStreaming<DescMessage, DescMessage> {
  return method.methodKind === "bidi_streaming";
}

// -- the tests ---------------------------------------------------------------------

describe("helpers that wrap an RPC express every request field", () => {
  const recording: Recording = { recorded: [], answers: {} };
  const recorded = recording.recorded;
  let server: Http2Server;
  let client: CtxwardenClient;

  before(async () => {
    server = createServer(connectNodeAdapter({ routes: recordingRoutes(recording) }));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    client = createClient(`127.0.0.1:${(server.address() as AddressInfo).port}`, { retry: false });
  });

  after(async () => {
    client?.close();
    await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())));
  });

  test("every RPC is classified: wrapped by a helper, or called directly", () => {
    const rpcs = new Set(ContextService.methods.map((m) => m.name));
    const wrapped = new Set(HELPERS.map((h) => h.rpc));
    const unclassified = [...rpcs].filter((rpc) => !DIRECT.has(rpc) && !wrapped.has(rpc));
    assert.deepEqual(unclassified, [], "new RPCs: add them to HELPERS (with a helper) or to DIRECT");
    const both = [...wrapped].filter((rpc) => DIRECT.has(rpc));
    assert.deepEqual(both, [], "RPCs both in HELPERS and in DIRECT: keep them with their helpers only");
    const stale = [...DIRECT, ...wrapped].filter((rpc) => !rpcs.has(rpc));
    assert.deepEqual(stale, [], "classified names that are no RPC of ContextService");
  });

  for (const helper of HELPERS) {
    test(`${helper.name} (${helper.rpc})`, async () => {
      recording.answers = helper.answers ?? {};
      const method = ContextService.methods.find((m) => m.name === helper.rpc);
      assert.ok(method !== undefined, `${helper.rpc} is no RPC of ContextService`);
      const fieldNames = new Set(method.input.fields.map((f) => f.name));
      const staleExemptions = Object.keys(helper.exempt).filter((name) => !fieldNames.has(name));
      assert.deepEqual(staleExemptions, [], `${helper.name}: exempt fields that ${method.input.name} does not have`);
      const exempt = method.input.fields.filter((f) => f.name in helper.exempt);

      for (const request of variants(method.input)) {
        recorded.length = 0;
        await helper.call(client, clone(method.input, request));
        const received = recorded.filter((r) => r.rpc === helper.rpc);
        assert.ok(received.length > 0, `${helper.name} sent no ${helper.rpc}`);
        for (const { request: got } of received) {
          const expected = clone(method.input, request);
          const actual = clone(method.input, got);
          for (const field of exempt) {
            clearField(expected, field);
            clearField(actual, field);
          }
          assert.ok(
            equals(method.input, actual, expected),
            `${helper.name}: the server received\n${toJsonString(method.input, actual)}\ninstead of\n` +
              `${toJsonString(method.input, expected)}\n(a field the helper does not pass on? ` +
              `make it expressible, or exempt it with a reason)`,
          );
        }
      }
    });
  }
});
