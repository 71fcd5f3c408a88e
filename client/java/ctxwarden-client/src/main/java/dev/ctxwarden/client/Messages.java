package dev.ctxwarden.client;

import ctxwarden.v1.MessageOuterClass.ContentBlock;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.MessageOuterClass.Role;
import ctxwarden.v1.MessageOuterClass.StopReason;
import ctxwarden.v1.MessageOuterClass.TextContent;
import ctxwarden.v1.MessageOuterClass.ToolCall;
import java.util.ArrayList;
import java.util.List;

/**
 * Builders of ctxwarden messages for {@link CtxwardenClient#appendMessages}, and readers of the
 * tool calls and text of a stored one. Each returns a built {@link Message}; use {@code
 * toBuilder()} to set more fields (message_id, metadata, usage, model, ...).
 */
public final class Messages {
  private Messages() {}

  /** A text content block. */
  public static ContentBlock text(String text) {
    return ContentBlock.newBuilder().setText(TextContent.newBuilder().setText(text)).build();
  }

  /** A user message with one text block. */
  public static Message user(String text) {
    return Message.newBuilder().setRole(Role.ROLE_USER).addContent(text(text)).build();
  }

  /**
   * An assistant message: a text block (left out when {@code text} is empty) followed by the tool
   * calls. Its stop reason is STOP_REASON_TOOL_USE with calls, STOP_REASON_STOP without.
   */
  public static Message assistant(String text, ToolCall... calls) {
    Message.Builder m =
        Message.newBuilder()
            .setRole(Role.ROLE_ASSISTANT)
            .setStopReason(calls.length > 0 ? StopReason.STOP_REASON_TOOL_USE : StopReason.STOP_REASON_STOP);
    if (text != null && !text.isEmpty()) {
      m.addContent(text(text));
    }
    for (ToolCall call : calls) {
      m.addContent(ContentBlock.newBuilder().setToolCall(call));
    }
    return m.build();
  }

  /**
   * A model call that failed with the provider error {@code errorMessage} (STOP_REASON_ERROR, no
   * content). Append it, then {@link CtxwardenClient#rollbackTurn} says whether to retry, compact
   * or give up.
   */
  public static Message failedAssistant(String errorMessage) {
    return Message.newBuilder()
        .setRole(Role.ROLE_ASSISTANT)
        .setStopReason(StopReason.STOP_REASON_ERROR)
        .setErrorMessage(errorMessage)
        .build();
  }

  /** A tool call for {@link #assistant}; {@code argumentsJson} is a JSON object text ("" means "{}"). */
  public static ToolCall toolCall(String id, String name, String argumentsJson) {
    return ToolCall.newBuilder().setId(id).setName(name).setArgumentsJson(argumentsJson).build();
  }

  /** The result of tool call {@code callId}: a tool-result message with one text block. */
  public static Message toolResult(String callId, String text) {
    return Message.newBuilder()
        .setRole(Role.ROLE_TOOL_RESULT)
        .setToolCallId(callId)
        .addContent(text(text))
        .build();
  }

  /** The result of tool call {@code callId} named {@code toolName}. */
  public static Message toolResult(String callId, String toolName, String text) {
    return toolResult(callId, text).toBuilder().setToolName(toolName).build();
  }

  /** A failed tool call's result (is_error set): {@code text} says what went wrong. */
  public static Message toolError(String callId, String text) {
    return toolResult(callId, text).toBuilder().setIsError(true).build();
  }

  /** The tool calls of {@code message}, in order (empty when it has none). */
  public static List<ToolCall> toolCalls(Message message) {
    List<ToolCall> calls = new ArrayList<>();
    for (ContentBlock b : message.getContentList()) {
      if (b.hasToolCall()) {
        calls.add(b.getToolCall());
      }
    }
    return calls;
  }

  /** The text blocks of {@code message}, joined with no separator ({@code ""} when none). */
  public static String text(Message message) {
    StringBuilder sb = new StringBuilder();
    for (ContentBlock b : message.getContentList()) {
      if (b.hasText()) {
        sb.append(b.getText().getText());
      }
    }
    return sb.toString();
  }
}
