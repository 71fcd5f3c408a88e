/**
 * The Vercel AI SDK (`ai`) with ctxwarden keeping the context.
 *
 *     import { generateText } from "ai";
 *     import { ctxwardenSteps } from "@ctxwarden/client/ai-sdk";
 *
 *     const steps = ctxwardenSteps(client, { sessionId });
 *     await generateText({ model, tools, messages: [{ role: "user", content: "hi" }], ...steps });
 *
 * `ctxwardenSteps` returns a `prepareStep` / `onStepFinish` pair: before each
 * step `prepareStep` appends the call's new messages (first step only) and
 * supplies the effective context (BuildModelInput: summary, truncated tool
 * outputs, no failed turns) as the step's `system` and `messages`;
 * `onStepFinish` appends what the step produced (the assistant message with
 * its usage, then the tool results). Pass only the new messages to
 * generateText/streamText: the history comes from ctxwarden.
 *
 * `toCtxwardenMessages` / `fromCtxwardenMessages` convert between AI SDK
 * `ModelMessage`s and ctxwarden messages, part by part: text, reasoning
 * (thinking), tool-call, tool-result (one TOOL_RESULT message per result),
 * image and file (ImageContent with the part's media type and bytes). Only
 * types come from `ai` (an optional peer dependency): this module loads none
 * of it at run time.
 */
import { isDeepStrictEqual } from "node:util";

import type { CallOptions, Client } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import type { FilePart, ImagePart, LanguageModelUsage, ModelMessage, ToolResultPart } from "ai";

import { ModelInputFormat, ModelInputView, type ContextService } from "./gen/ctxwarden/v1/context_service_pb.js";
import {
  ContentBlockSchema,
  MessageSchema,
  MessageVisibility,
  Role,
  StopReason,
  UsageSchema,
  type ContentBlock,
  type Message,
} from "./gen/ctxwarden/v1/message_pb.js";
import { InputCache } from "./input-cache.js";

/** Metadata key: how a tool result's output was typed (text, json, error-text, ...). */
export const AI_SDK_OUTPUT_TYPE = "ai-sdk.output-type";
/** Metadata key prefix: the file name of file part N (`ai-sdk.filename.N`). */
export const AI_SDK_FILENAME = "ai-sdk.filename.";

// ---------------------------------------------------------------------------
// ModelMessage -> ctxwarden Message

type DataLike = string | Uint8Array | ArrayBuffer | URL | { type: string; [key: string]: unknown } | Record<string, string>;

/** The bytes of an AI SDK data value: base64 text, bytes, a data: URL, or a FileData of type "data". */
function bytesOf(data: DataLike, what: string): Uint8Array {
  if (typeof data === "string") {
    const match = /^data:[^;,]*(;base64)?,(.*)$/s.exec(data);
    if (match !== null) {
      return match[1] !== undefined
        ? new Uint8Array(Buffer.from(match[2]!, "base64"))
        : new TextEncoder().encode(decodeURIComponent(match[2]!));
    }
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(data)) {
      return bytesOf(new URL(data), what);
    }
    return new Uint8Array(Buffer.from(data, "base64"));
  }
  if (data instanceof Uint8Array) {
    return data;
  }
  if (data instanceof ArrayBuffer) {
    return new Uint8Array(data);
  }
  if (data instanceof URL) {
    if (data.protocol === "data:") {
      return bytesOf(data.href, what);
    }
    throw new Error(`${what}: a ${data.protocol} URL cannot be stored; download it and pass its bytes`);
  }
  if (data["type"] === "data") {
    return bytesOf(data["data"] as DataLike, what);
  }
  if (data["type"] === "url") {
    return bytesOf(data["url"] as DataLike, what);
  }
  if (data["type"] === "text" && typeof data["text"] === "string") {
    return new TextEncoder().encode(data["text"]);
  }
  throw new Error(`${what}: a provider reference cannot be stored; pass the file's bytes`);
}

const text = (value: string): ContentBlock => create(ContentBlockSchema, { block: { case: "text", value: { text: value } } });

function fileBlock(mimeType: string, data: Uint8Array): ContentBlock {
  return create(ContentBlockSchema, { block: { case: "image", value: { mimeType, data } } });
}

function imageOrFile(part: ImagePart | FilePart, index: number, metadata: Record<string, string>): ContentBlock {
  if (part.type === "image") {
    return fileBlock(part.mediaType ?? "image/png", bytesOf(part.image as DataLike, "image part"));
  }
  if (part.filename !== undefined) {
    metadata[`${AI_SDK_FILENAME}${index}`] = part.filename;
  }
  return fileBlock(part.mediaType, bytesOf(part.data as DataLike, "file part"));
}

function toolResultMessage(part: ToolResultPart): Message {
  const metadata: Record<string, string> = { [AI_SDK_OUTPUT_TYPE]: part.output.type };
  const content: ContentBlock[] = [];
  let isError = false;
  const output = part.output;
  switch (output.type) {
    case "text":
      content.push(text(output.value));
      break;
    case "error-text":
      isError = true;
      content.push(text(output.value));
      break;
    case "json":
      content.push(text(JSON.stringify(output.value)));
      break;
    case "error-json":
      isError = true;
      content.push(text(JSON.stringify(output.value)));
      break;
    case "execution-denied":
      isError = true;
      content.push(text(output.reason ?? "The tool call was denied."));
      break;
    case "content":
      for (const [i, value] of output.value.entries()) {
        // Typed loosely: the file shapes differ between ai 6 (file-data,
        // image-data, media: base64 text) and ai 7 (file: tagged FileData;
        // the ai 6 shapes deprecated but accepted).
        const item = value as { type: string; text?: string; data?: unknown; mediaType?: string; filename?: string };
        if (item.type === "text") {
          content.push(text(item.text ?? ""));
        } else if (
          (item.type === "file" || item.type === "file-data" || item.type === "image-data" || item.type === "media") &&
          item.data !== undefined
        ) {
          if (item.filename !== undefined) {
            metadata[`${AI_SDK_FILENAME}${i}`] = item.filename;
          }
          const mediaType = item.mediaType ?? (item.type === "image-data" ? "image/png" : "application/octet-stream");
          content.push(fileBlock(mediaType, bytesOf(item.data as DataLike, "tool result file")));
        } else {
          throw new Error(`tool result ${part.toolCallId}: content of type ${item.type} cannot be stored`);
        }
      }
      break;
  }
  return create(MessageSchema, {
    role: Role.TOOL_RESULT,
    toolCallId: part.toolCallId,
    toolName: part.toolName,
    isError,
    content,
    metadata,
  });
}

/**
 * AI SDK messages as ctxwarden messages, for AppendMessages. A tool message
 * becomes one TOOL_RESULT message per result. System messages cannot be
 * stored (the system prompt is the session's: set it with CreateSession or
 * UpdateSession); parts ctxwarden has no block for (custom parts, tool
 * approvals, reasoning files, files by URL or provider reference) are an
 * Error.
 */
export function toCtxwardenMessages(messages: ModelMessage[]): Message[] {
  const out: Message[] = [];
  for (const message of messages) {
    switch (message.role) {
      case "system":
        throw new Error("a system message cannot be stored: the system prompt is the session's (CreateSession/UpdateSession)");
      case "user": {
        const metadata: Record<string, string> = {};
        const content =
          typeof message.content === "string"
            ? [text(message.content)]
            : message.content.map((part, i) => (part.type === "text" ? text(part.text) : imageOrFile(part, i, metadata)));
        out.push(create(MessageSchema, { role: Role.USER, content, metadata }));
        break;
      }
      case "assistant": {
        const metadata: Record<string, string> = {};
        const content: ContentBlock[] = [];
        const results: Message[] = [];
        const parts = typeof message.content === "string" ? [{ type: "text" as const, text: message.content }] : message.content;
        for (const [i, part] of parts.entries()) {
          switch (part.type) {
            case "text":
              content.push(text(part.text));
              break;
            case "reasoning": {
              const signature = part.providerOptions?.["anthropic"]?.["signature"];
              content.push(
                create(ContentBlockSchema, {
                  block: {
                    case: "thinking",
                    value: { thinking: part.text, signature: typeof signature === "string" ? signature : "" },
                  },
                }),
              );
              break;
            }
            case "tool-call":
              content.push(
                create(ContentBlockSchema, {
                  block: {
                    case: "toolCall",
                    value: { id: part.toolCallId, name: part.toolName, argumentsJson: JSON.stringify(part.input ?? {}) },
                  },
                }),
              );
              break;
            case "file":
              content.push(imageOrFile(part, i, metadata));
              break;
            case "tool-result":
              // A provider-executed tool's result, in the assistant message.
              results.push(toolResultMessage(part));
              break;
            default:
              throw new Error(`an assistant part of type ${part.type} cannot be stored`);
          }
        }
        const calls = content.some((b) => b.block.case === "toolCall");
        out.push(
          create(MessageSchema, {
            role: Role.ASSISTANT,
            content,
            metadata,
            stopReason: calls ? StopReason.TOOL_USE : StopReason.STOP,
          }),
          ...results,
        );
        break;
      }
      case "tool":
        for (const part of message.content) {
          if (part.type !== "tool-result") {
            throw new Error(`a tool part of type ${part.type} cannot be stored`);
          }
          out.push(toolResultMessage(part));
        }
        break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// ctxwarden Message -> ModelMessage

function blockText(block: ContentBlock): string | undefined {
  return block.block.case === "text" ? block.block.value.text : undefined;
}

function filePartOf(block: ContentBlock & { block: { case: "image" } }, filename: string | undefined): ImagePart | FilePart {
  const { mimeType, data } = block.block.value;
  if (mimeType.startsWith("image/") && filename === undefined) {
    return { type: "image", image: data, mediaType: mimeType };
  }
  return { type: "file", data, mediaType: mimeType, ...(filename !== undefined ? { filename } : {}) };
}

function toolResultPart(message: Message): ToolResultPart {
  const texts = message.content.map(blockText).filter((t): t is string => t !== undefined);
  const joined = texts.join("\n");
  const kind = message.metadata[AI_SDK_OUTPUT_TYPE];
  let output: ToolResultPart["output"];
  const hasFiles = message.content.some((b) => b.block.case === "image");
  if (kind === "content" || hasFiles) {
    type ContentOutput = Extract<ToolResultPart["output"], { type: "content" }>["value"][number];
    output = {
      type: "content",
      value: message.content.flatMap((b, i): ContentOutput[] => {
        if (b.block.case === "text") {
          return [{ type: "text" as const, text: b.block.value.text }];
        }
        if (b.block.case === "image") {
          // image-data / file-data (base64): the shapes both ai 6 and ai 7 accept.
          const filename = message.metadata[`${AI_SDK_FILENAME}${i}`];
          const { mimeType, data } = b.block.value;
          const base64 = Buffer.from(data).toString("base64");
          return [
            mimeType.startsWith("image/") && filename === undefined
              ? { type: "image-data" as const, data: base64, mediaType: mimeType }
              : { type: "file-data" as const, data: base64, mediaType: mimeType, ...(filename !== undefined ? { filename } : {}) },
          ];
        }
        return [];
      }),
    };
  } else if (kind === "json" || kind === "error-json") {
    type JsonValue = Extract<ToolResultPart["output"], { type: "json" }>["value"];
    let value: JsonValue;
    try {
      value = JSON.parse(joined) as JsonValue;
    } catch {
      value = joined; // truncated by the view: no longer JSON
    }
    output = kind === "json" ? { type: "json", value } : { type: "error-json", value };
  } else if (kind === "execution-denied") {
    output = { type: "execution-denied", reason: joined };
  } else {
    output = message.isError ? { type: "error-text", value: joined } : { type: "text", value: joined };
  }
  return { type: "tool-result", toolCallId: message.toolCallId, toolName: message.toolName, output };
}

/**
 * ctxwarden messages (e.g. ModelInput.messages) as AI SDK messages:
 * consecutive TOOL_RESULT messages become one tool message. Provider blocks
 * (items of one provider's wire format kept verbatim) are left out.
 */
export function fromCtxwardenMessages(messages: Message[]): ModelMessage[] {
  const out: ModelMessage[] = [];
  for (const message of messages) {
    switch (message.role) {
      case Role.USER: {
        type UserPart = Exclude<Extract<ModelMessage, { role: "user" }>["content"], string>[number];
        const content = message.content.flatMap((b, i): UserPart[] => {
          if (b.block.case === "text") {
            return [{ type: "text" as const, text: b.block.value.text }];
          }
          if (b.block.case === "image") {
            return [filePartOf(b as ContentBlock & { block: { case: "image" } }, message.metadata[`${AI_SDK_FILENAME}${i}`])];
          }
          return [];
        });
        out.push({ role: "user", content });
        break;
      }
      case Role.ASSISTANT: {
        type AssistantPart = Exclude<Extract<ModelMessage, { role: "assistant" }>["content"], string>[number];
        const content = message.content.flatMap((b, i): AssistantPart[] => {
          switch (b.block.case) {
            case "text":
              return [{ type: "text" as const, text: b.block.value.text }];
            case "thinking":
              return [
                {
                  type: "reasoning" as const,
                  text: b.block.value.thinking,
                  ...(b.block.value.signature !== ""
                    ? { providerOptions: { anthropic: { signature: b.block.value.signature } } }
                    : {}),
                },
              ];
            case "toolCall": {
              const args = b.block.value.argumentsJson;
              let input: unknown;
              try {
                input = JSON.parse(args === "" ? "{}" : args);
              } catch {
                input = args;
              }
              return [{ type: "tool-call" as const, toolCallId: b.block.value.id, toolName: b.block.value.name, input }];
            }
            case "image": {
              const part = filePartOf(b as ContentBlock & { block: { case: "image" } }, message.metadata[`${AI_SDK_FILENAME}${i}`]);
              return [part.type === "file" ? part : { type: "file" as const, data: part.image as Uint8Array, mediaType: part.mediaType ?? "image/png" }];
            }
            default:
              return [];
          }
        });
        out.push({ role: "assistant", content });
        break;
      }
      case Role.TOOL_RESULT: {
        const part = toolResultPart(message);
        const last = out.at(-1);
        if (last?.role === "tool") {
          last.content.push(part);
        } else {
          out.push({ role: "tool", content: [part] });
        }
        break;
      }
      default:
        break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// prepareStep / onStepFinish

/** The ContextService methods ctxwardenSteps calls. */
export type AiSdkClient = Pick<Client<typeof ContextService>, "appendMessages" | "buildModelInput">;

export interface CtxwardenStepsOptions {
  /** The ctxwarden session (it must exist). */
  sessionId: string;
  /** Append the call's initial messages (not system ones) before its first step (default true). */
  appendInitialMessages?: boolean;
  /** The cache the context is read through (default: a new one for this session). */
  inputCache?: InputCache;
  /** BuildModelInputRequest.max_output_tokens (0: the policy's reserve). */
  maxOutputTokens?: bigint;
  /** BuildModelInputRequest.auto_compact: compact first when over the threshold. */
  autoCompact?: boolean;
  /** CallOptions of every call (timeouts, signal, headers). */
  callOptions?: CallOptions;
}

/**
 * What prepareStep reads of its argument: ai 7 passes `initialMessages`; ai 6
 * passes only `messages`, which on the first step are the initial messages.
 */
export interface PrepareStepInput {
  stepNumber: number;
  messages: ModelMessage[];
  initialMessages?: ModelMessage[];
}

/** What onStepFinish reads of a step. */
export interface StepFinish {
  /** The step's index in its call (both ai 6 and ai 7 pass it). */
  stepNumber?: number;
  /** ai 7: this step's messages; ai 6: every response message of the call so far. */
  response: { messages: ModelMessage[] };
  usage?: LanguageModelUsage;
  model?: { provider: string; modelId: string };
  finishReason?: string;
}

export interface CtxwardenSteps {
  /** generateText/streamText `prepareStep`: the effective context as `system` and `messages`. */
  prepareStep(options: PrepareStepInput): Promise<{ system?: string; messages: ModelMessage[] }>;
  /** generateText/streamText `onStepFinish`: appends what the step produced. */
  onStepFinish(step: StepFinish): Promise<void>;
}

const STOP_REASONS: Record<string, StopReason> = {
  stop: StopReason.STOP,
  length: StopReason.LENGTH,
  "tool-calls": StopReason.TOOL_USE,
  error: StopReason.ERROR,
  interrupted: StopReason.ABORTED,
};

/**
 * A prepareStep / onStepFinish pair that keeps an AI SDK tool loop's context
 * in the ctxwarden session `sessionId`. Spread it into generateText or
 * streamText: `generateText({ model, tools, messages: newMessages, ...steps })`.
 * Works with `ai` 6 and 7. A pair serves one call at a time (it tracks the
 * running call's steps); concurrent calls need a pair each.
 */
export function ctxwardenSteps(client: AiSdkClient, opts: CtxwardenStepsOptions): CtxwardenSteps {
  const cache = opts.inputCache ?? new InputCache(client, { capacity: 1 });
  const { sessionId, callOptions } = opts;
  // The response messages of the current generateText/streamText call that
  // were appended already: ai 6 hands every step the call's response
  // messages so far, ai 7 only the step's own.
  let appended: ModelMessage[] = [];
  return {
    async prepareStep({ stepNumber, messages: stepMessages, initialMessages }) {
      if (stepNumber === 0) {
        appended = [];
      }
      if (stepNumber === 0 && opts.appendInitialMessages !== false) {
        const fresh = toCtxwardenMessages((initialMessages ?? stepMessages).filter((m) => m.role !== "system"));
        if (fresh.length > 0) {
          await client.appendMessages({ sessionId, messages: fresh }, callOptions);
        }
      }
      const input = await cache.build(
        {
          sessionId,
          format: ModelInputFormat.NATIVE,
          view: ModelInputView.FULL,
          maxOutputTokens: opts.maxOutputTokens ?? 0n,
          autoCompact: opts.autoCompact ?? false,
        },
        callOptions,
      );
      const messages = fromCtxwardenMessages(input.messages);
      return input.systemPrompt === "" ? { messages } : { system: input.systemPrompt, messages };
    },
    async onStepFinish(step) {
      if (step.stepNumber === 0) {
        appended = [];
      }
      const all = step.response.messages;
      const cumulative =
        appended.length > 0 && all.length > appended.length && appended.every((m, i) => isDeepStrictEqual(m, all[i]));
      const produced = cumulative ? all.slice(appended.length) : all;
      appended = [...appended, ...produced];
      const messages = toCtxwardenMessages(produced);
      const answer = messages.find((m) => m.role === Role.ASSISTANT);
      if (answer !== undefined) {
        const usage = step.usage;
        if (usage !== undefined && (usage.inputTokens !== undefined || usage.outputTokens !== undefined)) {
          answer.usage = create(UsageSchema, {
            inputTokens: BigInt(usage.inputTokenDetails?.noCacheTokens ?? usage.inputTokens ?? 0),
            outputTokens: BigInt(usage.outputTokens ?? 0),
            cacheReadTokens: BigInt(usage.inputTokenDetails?.cacheReadTokens ?? 0),
            cacheWriteTokens: BigInt(usage.inputTokenDetails?.cacheWriteTokens ?? 0),
            totalTokens: BigInt(usage.totalTokens ?? (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0)),
          });
        }
        if (step.model !== undefined) {
          answer.model = step.model.modelId;
          answer.provider = step.model.provider;
        }
        const stop = step.finishReason === undefined ? undefined : STOP_REASONS[step.finishReason];
        if (stop !== undefined && stop !== StopReason.ERROR && stop !== StopReason.ABORTED) {
          answer.stopReason = stop;
        }
      }
      if (messages.length > 0) {
        await client.appendMessages({ sessionId, messages }, callOptions);
      }
    },
  };
}

/**
 * A message the agent keeps in the history but never sends to the model
 * (visibility HISTORY_ONLY), e.g. a UI note: listed by ListMessages, left out
 * of every model input and of compaction summaries.
 */
export function historyOnly(message: Message): Message {
  return create(MessageSchema, { ...message, visibility: MessageVisibility.HISTORY_ONLY });
}
