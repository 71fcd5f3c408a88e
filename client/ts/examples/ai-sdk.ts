/**
 * A Vercel AI SDK tool loop whose context ctxwarden keeps (README "Vercel AI
 * SDK"). `model` is any AI SDK language model (e.g. `openai("gpt-4o")` from
 * `@ai-sdk/openai`, or, in the tests, the SDK's MockLanguageModelV3). The
 * region between the markers is the README's example.
 */
import { generateText, stepCountIs, tool, type LanguageModel } from "ai";
import { z } from "zod";

import type { CtxwardenClient } from "../src/index.js";
import { ctxwardenSteps } from "../src/ai-sdk.js";

export async function aiSdkExample(client: CtxwardenClient, model: LanguageModel): Promise<string> {
  // #region readme-ai-sdk
  const { sessionId } = await client.createSession({ session: { systemPrompt: "You read files." } });
  const steps = ctxwardenSteps(client, { sessionId, autoCompact: true }); // prepareStep + onStepFinish
  const read = tool({
    description: "Read a file",
    inputSchema: z.object({ path: z.string() }),
    execute: async ({ path }) => `contents of ${path}`,
  });
  await generateText({ model, tools: { read }, stopWhen: stepCountIs(5), prompt: "Read a.txt", ...steps });
  const { text } = await generateText({ model, prompt: "What did a.txt say?", ...steps }); // sees the first call
  // #endregion readme-ai-sdk
  return text;
}
