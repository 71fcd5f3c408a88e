/**
 * An @openai/agents agent whose conversation ctxwarden keeps (README
 * "OpenAI Agents SDK"). `model` is any Agents SDK model: a model name with
 * the OpenAI provider of `@openai/agents`, or, in the tests, a
 * scripted model (test/scripted-model.ts). The region between the markers is the README's example.
 */
import { Agent, run, type AgentInputItem, type Model } from "@openai/agents-core";

import type { CtxwardenClient } from "../src/index.js";
import { CtxwardenSession } from "../src/openai-agents.js";

export async function agentsExample(
  client: CtxwardenClient,
  model: Model | string,
): Promise<{ answer: unknown; items: AgentInputItem[] }> {
  // #region readme-openai-agents
  const session = new CtxwardenSession(client, {
    sessionId: "support-chat-42", // created on first use
    session: { systemPrompt: "You are a terse support agent." },
    autoCompact: true, // compact when the history nears the model's window
  });
  const agent = new Agent({ name: "support", instructions: "You are a terse support agent.", model });
  await run(agent, "My order 1234 has not arrived.", { session });
  const result = await run(agent, "Which order was it?", { session }); // sees the first run
  const items = await session.getItems(); // what the model sees: summary + recent items
  // #endregion readme-openai-agents
  return { answer: result.finalOutput, items };
}
