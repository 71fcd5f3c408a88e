// A Model (the SDK's own interface) that plays a script, for example.test.ts.
// Importing this module (or preloading it: node --import tsx --import
// ./scripted-model.ts example.ts) disables tracing and makes a provider of
// scripted models the SDK's default, so the model name example.ts passes
// resolves to one that plays COMPACTING_SCRIPT, as `import "@openai/agents"`
// would make it resolve to an OpenAI model.
import {
  Usage,
  setDefaultModelProvider,
  setTracingDisabled,
  type AgentInputItem,
  type AgentOutputItem,
  type Model,
  type ModelProvider,
  type ModelRequest,
  type ModelResponse,
  type StreamEvent,
} from "@openai/agents-core";

export const said = (text: string): AgentOutputItem => ({
  type: "message",
  role: "assistant",
  status: "completed",
  content: [{ type: "output_text", text }],
});

/** Four turns; the third one's output starts with a provider `compaction` item. */
export const COMPACTING_SCRIPT: AgentOutputItem[][] = [
  [said("answer 1")],
  [said("answer 2")],
  [{ type: "compaction", encrypted_content: "enc-summary-of-turns-1-2" } as AgentOutputItem, said("answer 3")],
  [said("answer 4")],
];

/** Answers call N with outputs[N]; records each request's input. */
export class ScriptedModel implements Model {
  readonly inputs: AgentInputItem[][] = [];
  readonly #outputs: AgentOutputItem[][];

  constructor(outputs: AgentOutputItem[][]) {
    this.#outputs = structuredClone(outputs);
  }

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input: AgentInputItem[] =
      typeof request.input === "string"
        ? [{ role: "user", content: [{ type: "input_text", text: request.input }] }]
        : structuredClone(request.input);
    this.inputs.push(input);
    const output = this.#outputs.shift();
    if (output === undefined) {
      throw new Error(`unexpected model call ${this.inputs.length}: the script has ended`);
    }
    return {
      usage: new Usage({ requests: 1, inputTokens: 10, outputTokens: 5, totalTokens: 15 }),
      output,
      responseId: `resp-${this.inputs.length}`,
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("ScriptedModel does not stream");
  }
}

/** One ScriptedModel per model name, each playing `script` from its start. */
class ScriptedProvider implements ModelProvider {
  readonly #models = new Map<string, ScriptedModel>();
  constructor(private readonly script: AgentOutputItem[][]) {}

  getModel(name = "default"): Model {
    const model = this.#models.get(name) ?? new ScriptedModel(this.script);
    this.#models.set(name, model);
    return model;
  }
}

setTracingDisabled(true);
setDefaultModelProvider(new ScriptedProvider(COMPACTING_SCRIPT));
