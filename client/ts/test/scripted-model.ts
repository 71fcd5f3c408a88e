/**
 * A scripted Agents SDK `Model` for the tests: each call returns the next
 * scripted output and is recorded. (`@openai/agents-core` 0.15+ ships one as
 * `@openai/agents-core/testing`; 0.14, the newest release that runs on Node 20
 * without an engine warning, does not.) The helpers build the same items as
 * that module's `assistantMessage` and `functionCall`.
 */
import {
  Usage,
  type AgentOutputItem,
  type AssistantMessageItem,
  type FunctionCallItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type StreamEvent,
} from "@openai/agents-core";

/** A completed assistant text message. */
export function assistantMessage(text: string): AssistantMessageItem {
  return { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] };
}

/** A completed function call (`id` = `callId`). */
export function functionCall(name: string, args: string | Record<string, unknown>, options: { callId: string }): FunctionCallItem {
  return {
    type: "function_call",
    name,
    callId: options.callId,
    id: options.callId,
    status: "completed",
    arguments: typeof args === "string" ? args : JSON.stringify(args),
  };
}

/** A Model that answers call N with `outputs[N]`, and records every request. */
export class ScriptedModel implements Model {
  readonly calls: ModelRequest[] = [];
  #outputs: AgentOutputItem[][];

  constructor(outputs: AgentOutputItem[][]) {
    this.#outputs = [...outputs];
  }

  /** The most recent request, if any. */
  get lastCall(): { request: ModelRequest } | undefined {
    const request = this.calls.at(-1);
    return request === undefined ? undefined : { request };
  }

  /** Throws when scripted outputs are left. */
  assertComplete(): void {
    if (this.#outputs.length > 0) {
      throw new Error(`${this.#outputs.length} scripted model output(s) were not used`);
    }
  }

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    // A snapshot of the input: the runner goes on changing its own array.
    const input = typeof request.input === "string" ? request.input : (JSON.parse(JSON.stringify(request.input)) as typeof request.input);
    this.calls.push({ ...request, input });
    const output = this.#outputs.shift();
    if (output === undefined) {
      throw new Error(`unexpected model call ${this.calls.length}: nothing scripted`);
    }
    return {
      usage: new Usage({ requests: 1, inputTokens: 10, outputTokens: 5, totalTokens: 15 }),
      output,
      responseId: `resp-${this.calls.length}`,
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("ScriptedModel does not stream");
  }
}
