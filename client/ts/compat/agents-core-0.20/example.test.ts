// example.ts, the program docs/guides/typescript-compaction.md shows, against a
// real ctxwarden server: its run() with a scripted Model, and the program
// itself with the scripted provider as the SDK's default (scripted-model.ts).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import type { AgentInputItem } from "@openai/agents-core";

import { MessageState, createClient, type CtxwardenClient } from "../../src/index.js";
import { PROVIDER_COMPACTION_SUMMARY } from "../../src/openai-agents.js";
import { startServer, type RunningServer } from "../../test/server.js";
import { run } from "./example.js";
import { COMPACTING_SCRIPT, ScriptedModel } from "./scripted-model.js";

const QUESTIONS = ["question 1", "question 2", "question 3", "question 4"];

/** `role:text`, or `compaction:<encrypted content>`, per item. */
function texts(items: AgentInputItem[]): string[] {
  return items.map((item) => {
    const i = item as { type?: string; role?: string; content?: unknown; encrypted_content?: string };
    if (i.type === "compaction") {
      return `compaction:${i.encrypted_content}`;
    }
    const text = typeof i.content === "string" ? i.content : (i.content as { text?: string }[]).map((c) => c.text).join("");
    return `${i.role}:${text}`;
  });
}

describe("the @openai/agents-core 0.20 example against a real ctxwarden server", () => {
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

  test("run(): the compaction becomes one checkpoint, the history stays whole", async () => {
    const model = new ScriptedModel(COMPACTING_SCRIPT);
    const chat = await run(client, model, "example-run", QUESTIONS);
    assert.deepEqual(chat.answers, ["answer 1", "answer 2", "answer 3", "answer 4"]);
    // The fourth request starts at the compaction item.
    assert.deepEqual(texts(model.inputs[3]!), ["compaction:enc-summary-of-turns-1-2", "assistant:answer 3", "user:question 4"]);
    assert.equal(chat.checkpoints, 1);
    assert.equal(chat.stored, 7);
    const items = texts(chat.items);
    assert.ok(items[0]!.includes(PROVIDER_COMPACTION_SUMMARY), items[0]);
    assert.deepEqual(items.slice(1), [
      "compaction:enc-summary-of-turns-1-2",
      "assistant:answer 3",
      "user:question 4",
      "assistant:answer 4",
    ]);
    const listed = await client.listMessages({ sessionId: "example-run", includeRolledBack: true });
    assert.equal(listed.messages.length, 7);
    assert.ok(listed.messages.every((m) => m.state !== MessageState.ROLLED_BACK));
  });

  test("the program prints the answers and what ctxwarden keeps", async () => {
    const cwd = fileURLToPath(new URL(".", import.meta.url));
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("CTXWARDEN_")));
    const args = ["--import", "tsx", "--import", "./scripted-model.ts", "example.ts", ...QUESTIONS];
    const { stdout } = await promisify(execFile)(process.execPath, args, {
      cwd,
      env: { ...env, CTXWARDEN_TARGET: server.target },
      timeout: 60_000,
    });
    assert.deepEqual(stdout.trim().split("\n"), [
      "assistant: answer 1",
      "assistant: answer 2",
      "assistant: answer 3",
      "assistant: answer 4",
      "7 messages stored, 1 checkpoint(s), 5 session items",
    ]);
    const { compactions } = await client.listCompactions({ sessionId: "chat-42" });
    assert.equal(compactions.length, 1);
  });
});
