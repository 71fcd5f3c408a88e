// CtxwardenSession with the Runner of @openai/agents-core 0.20. When a model
// output holds a provider `compaction` item, the Runner calls the session's
// replaceHistoryWithCompaction: ctxwarden commits a checkpoint and deletes nothing.
//
//   CTXWARDEN_TARGET  server address (default 127.0.0.1:50051)
//   OPENAI_MODEL      model name (default gpt-5-mini), resolved by the SDK's default
//                     model provider: importing "@openai/agents" sets OpenAI's (it
//                     reads OPENAI_API_KEY), setDefaultModelProvider sets another
//
// Run: npx tsx example.ts "What changed since yesterday?" "And before that?"
// (example.test.ts runs it against a real ctxwarden server with a scripted
// Model). In your project, import from "@ctxwarden/client" and
// "@ctxwarden/client/openai-agents".
import { pathToFileURL } from "node:url";

import { Agent, Runner, type AgentInputItem, type Model } from "@openai/agents-core";

import { createClient, type CtxwardenClient } from "../../src/index.js";
import { CtxwardenSession } from "../../src/openai-agents.js";

export interface Chat {
  answers: unknown[];
  /** Messages in ctxwarden's history (ListMessages, every page): compacted or not. */
  stored: number;
  /** Compaction checkpoints (ListCompactions). */
  checkpoints: number;
  /** What the session gives the Runner: the checkpoint's summary, the compaction item, what follows. */
  items: AgentInputItem[];
}

/** Asks `questions` one run each in session `sessionId`, then reads what ctxwarden keeps. */
export async function run(
  client: CtxwardenClient,
  model: Model | string,
  sessionId: string,
  questions: string[],
): Promise<Chat> {
  const session = new CtxwardenSession(client, { sessionId }); // created on first use
  const agent = new Agent({
    name: "assistant",
    instructions: "Be brief.",
    model,
    // OpenAI Responses compaction: past this many tokens, the model's output
    // starts with a `compaction` item that stands for what came before.
    modelSettings: { contextManagement: [{ type: "compaction", compactThreshold: 200_000 }] },
  });
  const runner = new Runner();
  const answers: unknown[] = [];
  for (const question of questions) {
    answers.push((await runner.run(agent, question, { session })).finalOutput);
  }
  // After a compaction: the whole history is still there, and one checkpoint.
  let stored = 0;
  let pageToken = "";
  do {
    const page = await client.listMessages({ sessionId, pageToken, pageSize: 1000 });
    stored += page.messages.length;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  const { compactions } = await client.listCompactions({ sessionId, pageSize: 1000 });
  return { answers, stored, checkpoints: compactions.length, items: await session.getItems() };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = createClient(process.env.CTXWARDEN_TARGET ?? "127.0.0.1:50051");
  try {
    const chat = await run(client, process.env.OPENAI_MODEL ?? "gpt-5-mini", "chat-42", process.argv.slice(2));
    chat.answers.forEach((answer) => console.log(`assistant: ${String(answer)}`));
    console.log(`${chat.stored} messages stored, ${chat.checkpoints} checkpoint(s), ${chat.items.length} session items`);
  } finally {
    client.close();
  }
}
