/**
 * Agents SDK items <-> OpenAI Responses input items (the wire format
 * AppendModelOutput's items_json and BuildModelInput's OPENAI_RESPONSES
 * rendering speak), for CtxwardenSession. Only types come from
 * `@openai/agents-core`.
 */
import type {
  AgentInputItem,
  AssistantMessageItem,
  FunctionCallItem,
  FunctionCallResultItem,
  ReasoningItem,
  UserMessageItem,
} from "@openai/agents-core";

type Wire = Record<string, unknown>;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function withId(out: Wire, id: string | undefined): Wire {
  if (id !== undefined) {
    out["id"] = id;
  }
  return out;
}

function snakeCase(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function camelCase(key: string): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** An image reference (a data URL, a URL or raw base64) as Responses' image_url. */
function imageUrl(image: string): string {
  return /^(data:|https?:)/.test(image) ? image : `data:image/png;base64,${image}`;
}

function userPartToWire(part: unknown): unknown {
  if (!isRecord(part)) {
    return part;
  }
  switch (part["type"]) {
    case "input_text":
      return { type: "input_text", text: part["text"] };
    case "input_image": {
      const out: Wire = { type: "input_image" };
      const image = part["image"];
      if (typeof image === "string") {
        out["image_url"] = imageUrl(image);
      } else if (isRecord(image) && typeof image["id"] === "string") {
        out["file_id"] = image["id"];
      }
      if (part["detail"] !== undefined) {
        out["detail"] = part["detail"];
      }
      return out;
    }
    case "input_file": {
      const out: Wire = { type: "input_file" };
      const file = part["file"];
      if (typeof file === "string") {
        out[/^https?:/.test(file) ? "file_url" : "file_data"] = file;
      } else if (isRecord(file) && typeof file["id"] === "string") {
        out["file_id"] = file["id"];
      } else if (isRecord(file) && typeof file["url"] === "string") {
        out["file_url"] = file["url"];
      }
      if (part["filename"] !== undefined) {
        out["filename"] = part["filename"];
      }
      return out;
    }
    default:
      return genericToWire(part);
  }
}

function userPartFromWire(part: unknown): unknown {
  if (!isRecord(part)) {
    return part;
  }
  switch (part["type"]) {
    case "input_text":
      return { type: "input_text", text: part["text"] };
    case "input_image": {
      const out: Wire = { type: "input_image" };
      if (typeof part["image_url"] === "string") {
        out["image"] = part["image_url"];
      } else if (typeof part["file_id"] === "string") {
        out["image"] = { id: part["file_id"] };
      }
      // "auto" is the default the server fills in.
      if (part["detail"] !== undefined && part["detail"] !== "auto") {
        out["detail"] = part["detail"];
      }
      return out;
    }
    case "input_file": {
      const out: Wire = { type: "input_file" };
      if (typeof part["file_data"] === "string") {
        out["file"] = part["file_data"];
      } else if (typeof part["file_id"] === "string") {
        out["file"] = { id: part["file_id"] };
      } else if (typeof part["file_url"] === "string") {
        out["file"] = { url: part["file_url"] };
      }
      if (part["filename"] !== undefined) {
        out["filename"] = part["filename"];
      }
      return out;
    }
    default:
      return genericFromWire(part);
  }
}

function toolOutputToWire(output: FunctionCallResultItem["output"]): unknown {
  if (typeof output === "string") {
    return output;
  }
  if (Array.isArray(output)) {
    return output.map(userPartToWire);
  }
  switch (output.type) {
    case "text":
      return output.text;
    case "image":
      if (typeof output.image === "string") {
        return [{ type: "input_image", image_url: imageUrl(output.image) }];
      }
      return JSON.stringify(output);
    default:
      return JSON.stringify(output);
  }
}

/** Any other item: its keys in snake_case, its providerData's members merged in. */
function genericToWire(item: Record<string, unknown>): Wire {
  const out: Wire = {};
  for (const [key, value] of Object.entries(item)) {
    if (key === "providerData" && isRecord(value)) {
      for (const [k, v] of Object.entries(value)) {
        out[snakeCase(k)] = v;
      }
    } else {
      out[snakeCase(key)] = value;
    }
  }
  return out;
}

function genericFromWire(item: Record<string, unknown>): Wire {
  const out: Wire = {};
  for (const [key, value] of Object.entries(item)) {
    out[camelCase(key)] = value;
  }
  return out;
}

/** An Agents SDK item as an OpenAI Responses input item (AppendModelOutput's items_json). */
export function toResponsesItem(item: AgentInputItem): Wire {
  if ("role" in item) {
    switch (item.role) {
      case "user":
        return withId(
          {
            type: "message",
            role: "user",
            content: typeof item.content === "string" ? item.content : item.content.map(userPartToWire),
          },
          item.id,
        );
      case "system":
        return withId({ type: "message", role: "system", content: item.content }, item.id);
      case "assistant":
        return withId(
          {
            type: "message",
            role: "assistant",
            status: item.status,
            content: item.content.map((part) => {
              switch (part.type) {
                case "output_text":
                  return { type: "output_text", text: part.text, annotations: [] };
                case "refusal":
                  return { type: "refusal", refusal: part.refusal };
                default:
                  return genericToWire(part);
              }
            }),
          },
          item.id,
        );
    }
  }
  switch (item.type) {
    case "function_call":
      return withId(
        {
          type: "function_call",
          call_id: item.callId,
          name: item.name,
          arguments: item.arguments,
          ...(item.status !== undefined ? { status: item.status } : {}),
          ...(item.namespace !== undefined ? { namespace: item.namespace } : {}),
        },
        item.id,
      );
    case "function_call_result":
      return withId(
        { type: "function_call_output", call_id: item.callId, output: toolOutputToWire(item.output) },
        item.id,
      );
    case "reasoning": {
      const out: Wire = {
        type: "reasoning",
        summary: item.content.map((c) => ({ type: "summary_text", text: c.text })),
      };
      if (item.rawContent !== undefined) {
        out["content"] = item.rawContent.map((c) => ({ type: "reasoning_text", text: c.text }));
      }
      const encrypted = item.providerData?.["encryptedContent"] ?? item.providerData?.["encrypted_content"];
      if (typeof encrypted === "string") {
        out["encrypted_content"] = encrypted;
      }
      return withId(out, item.id);
    }
    default:
      if ((item as { type?: unknown }).type === "compaction") {
        return compactionToWire(item as Record<string, unknown>);
      }
      return genericToWire(item as Record<string, unknown>);
  }
}

/** A Responses `compaction` item: the SDK keeps its wire names (encrypted_content, created_by). */
function compactionToWire(item: Record<string, unknown>): Wire {
  const out: Wire = {};
  for (const [key, value] of Object.entries(item)) {
    if (key !== "providerData") {
      out[snakeCase(key)] = value;
    }
  }
  return out;
}

/** Each item as a round trip through ctxwarden gives it back (for comparisons). */
export function comparableItems(items: AgentInputItem[]): AgentInputItem[] {
  return items.map((item) => fromResponsesItems([toResponsesItem(item)])[0] ?? item);
}

/** OpenAI Responses input items (BuildModelInput's rendered `input`) as Agents SDK items. */
export function fromResponsesItems(wire: unknown[]): AgentInputItem[] {
  // function_call_output names no tool; the Agents SDK item does.
  const toolNames = new Map<string, string>();
  for (const w of wire) {
    if (isRecord(w) && w["type"] === "function_call" && typeof w["call_id"] === "string") {
      toolNames.set(w["call_id"], String(w["name"] ?? ""));
    }
  }
  return wire.filter(isRecord).map((w) => fromResponsesItem(w, toolNames));
}

function fromResponsesItem(w: Record<string, unknown>, toolNames: Map<string, string>): AgentInputItem {
  const role = w["role"];
  if ((w["type"] === undefined || w["type"] === "message") && typeof role === "string") {
    const content = w["content"];
    switch (role) {
      case "user": {
        const item: UserMessageItem = {
          role: "user",
          content: typeof content === "string" ? content : (asArray(content).map(userPartFromWire) as UserMessageItem["content"]),
        };
        return item;
      }
      case "assistant": {
        const parts =
          typeof content === "string"
            ? [{ type: "output_text" as const, text: content }]
            : asArray(content).map((part) => {
                if (isRecord(part) && part["type"] === "output_text") {
                  return { type: "output_text" as const, text: String(part["text"] ?? "") };
                }
                if (isRecord(part) && part["type"] === "refusal") {
                  return { type: "refusal" as const, refusal: String(part["refusal"] ?? "") };
                }
                return genericFromWire(isRecord(part) ? part : {});
              });
        const status = w["status"];
        const item: AssistantMessageItem = {
          role: "assistant",
          status: status === "in_progress" || status === "incomplete" ? status : "completed",
          content: parts as AssistantMessageItem["content"],
        };
        return item;
      }
      default:
        // system, developer: text only.
        return {
          role: "system",
          content:
            typeof content === "string"
              ? content
              : asArray(content)
                  .map((p) => (isRecord(p) ? String(p["text"] ?? "") : ""))
                  .join("\n"),
        };
    }
  }
  switch (w["type"]) {
    case "function_call": {
      const item: FunctionCallItem = {
        type: "function_call",
        callId: String(w["call_id"] ?? ""),
        name: String(w["name"] ?? ""),
        arguments: String(w["arguments"] ?? ""),
        status: "completed",
      };
      if (typeof w["namespace"] === "string") {
        item.namespace = w["namespace"];
      }
      return item;
    }
    case "function_call_output": {
      const callId = String(w["call_id"] ?? "");
      const output = w["output"];
      const item: FunctionCallResultItem = {
        type: "function_call_result",
        callId,
        name: toolNames.get(callId) ?? "",
        status: "completed",
        output:
          typeof output === "string"
            ? output
            : (asArray(output).map(userPartFromWire) as Extract<FunctionCallResultItem["output"], unknown[]>),
      };
      return item;
    }
    case "reasoning": {
      const item: ReasoningItem = {
        type: "reasoning",
        content: asArray(w["summary"]).map((s) => ({
          type: "input_text" as const,
          text: isRecord(s) ? String(s["text"] ?? "") : "",
        })),
      };
      if (Array.isArray(w["content"])) {
        item.rawContent = w["content"].map((c) => ({
          type: "reasoning_text" as const,
          text: isRecord(c) ? String(c["text"] ?? "") : "",
        }));
      }
      if (typeof w["id"] === "string") {
        item.id = w["id"];
      }
      if (typeof w["encrypted_content"] === "string") {
        item.providerData = { encryptedContent: w["encrypted_content"] };
      }
      return item;
    }
    case "compaction":
      return { ...w } as AgentInputItem;
    default:
      return genericFromWire(w) as AgentInputItem;
  }
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/** The items of a rendered OPENAI_RESPONSES input (`{"instructions", "input": [...]}`). */
export function fromResponsesInput(renderedJson: string): AgentInputItem[] {
  if (renderedJson === "") {
    return [];
  }
  const parsed: unknown = JSON.parse(renderedJson);
  if (!isRecord(parsed)) {
    throw new Error("BuildModelInput rendered OPENAI_RESPONSES input that is not a JSON object");
  }
  return fromResponsesItems(asArray(parsed["input"]));
}
