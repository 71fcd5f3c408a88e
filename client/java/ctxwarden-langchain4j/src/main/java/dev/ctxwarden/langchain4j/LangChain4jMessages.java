package dev.ctxwarden.langchain4j;

import com.google.protobuf.ByteString;
import ctxwarden.v1.MessageOuterClass.ContentBlock;
import ctxwarden.v1.MessageOuterClass.ImageContent;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.MessageOuterClass.Role;
import ctxwarden.v1.MessageOuterClass.StopReason;
import ctxwarden.v1.MessageOuterClass.ThinkingContent;
import dev.ctxwarden.client.Messages;
import dev.ctxwarden.client.memory.ConversationStore;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.data.image.Image;
import dev.langchain4j.data.message.AiMessage;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.Content;
import dev.langchain4j.data.message.SystemMessage;
import dev.langchain4j.data.message.TextContent;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;

/**
 * LangChain4j messages to ctxwarden messages and back.
 *
 * <ul>
 *   <li>{@link UserMessage}: a USER message, its text contents as text blocks and its images
 *       given as base64 data as image blocks; its name in metadata {@value #NAME_KEY};
 *   <li>{@link AiMessage}: an ASSISTANT message, its thinking (a thinking block), its text, then
 *       its tool execution requests as tool calls (id, name, arguments); stop reason TOOL_USE
 *       with requests, STOP without;
 *   <li>{@link ToolExecutionResultMessage}: a TOOL_RESULT (tool_call_id = the request's id,
 *       tool_name, text, is_error);
 *   <li>{@link SystemMessage}: a history-only {@link ConversationStore#systemMessage}, and the
 *       session's system prompt.
 * </ul>
 *
 * Not stored: attributes, thinking signatures, images given as a URL, audio, video and PDF
 * contents, non-text tool result contents, {@code CustomMessage} (IllegalArgumentException for
 * what cannot be stored). Read back, a ctxwarden message another client stored keeps what
 * LangChain4j can hold: provider blocks are left out.
 */
public final class LangChain4jMessages {
  /** Metadata holding a {@link UserMessage}'s name. */
  public static final String NAME_KEY = "ctxwarden.langchain4j_user_name";

  private LangChain4jMessages() {}

  /** A LangChain4j message as a ctxwarden message. */
  public static Message toCtxwarden(ChatMessage message) {
    if (message instanceof SystemMessage system) {
      return ConversationStore.systemMessage(nullToEmpty(system.text()));
    }
    if (message instanceof UserMessage user) {
      Message.Builder m = Message.newBuilder().setRole(Role.ROLE_USER);
      for (Content c : user.contents()) {
        if (c instanceof TextContent text) {
          m.addContent(Messages.text(nullToEmpty(text.text())));
        } else if (c instanceof dev.langchain4j.data.message.ImageContent image) {
          m.addContent(image(image.image()));
        } else {
          throw new IllegalArgumentException(
              "ctxwarden stores text and base64 image contents only, not " + c.type());
        }
      }
      if (m.getContentCount() == 0) {
        m.addContent(Messages.text(""));
      }
      if (user.name() != null) {
        m.putMetadata(NAME_KEY, user.name());
      }
      return m.build();
    }
    if (message instanceof AiMessage ai) {
      Message.Builder m = Message.newBuilder().setRole(Role.ROLE_ASSISTANT)
          .setStopReason(ai.hasToolExecutionRequests() ? StopReason.STOP_REASON_TOOL_USE : StopReason.STOP_REASON_STOP);
      if (ai.thinking() != null && !ai.thinking().isEmpty()) {
        m.addContent(ContentBlock.newBuilder().setThinking(ThinkingContent.newBuilder().setThinking(ai.thinking())));
      }
      if (ai.text() != null && !(ai.text().isEmpty() && ai.hasToolExecutionRequests())) {
        m.addContent(Messages.text(ai.text()));
      }
      for (ToolExecutionRequest r : ai.toolExecutionRequests()) {
        m.addContent(ContentBlock.newBuilder().setToolCall(
            Messages.toolCall(nullToEmpty(r.id()), nullToEmpty(r.name()), nullToEmpty(r.arguments()))));
      }
      if (m.getContentCount() == 0) {
        m.addContent(Messages.text(""));
      }
      return m.build();
    }
    if (message instanceof ToolExecutionResultMessage result) {
      Message m = Messages.toolResult(nullToEmpty(result.id()), nullToEmpty(result.toolName()), nullToEmpty(result.text()));
      return Boolean.TRUE.equals(result.isError()) ? m.toBuilder().setIsError(true).build() : m;
    }
    throw new IllegalArgumentException(
        "ctxwarden: cannot store a " + message.getClass().getName() + " (" + message.type() + ")");
  }

  /** A ctxwarden message as a LangChain4j message. */
  public static ChatMessage fromCtxwarden(Message m) {
    if (ConversationStore.isSystemMessage(m)) {
      return SystemMessage.from(Messages.text(m));
    }
    switch (m.getRole()) {
      case ROLE_ASSISTANT -> {
        List<ToolExecutionRequest> requests = new ArrayList<>();
        StringBuilder thinking = new StringBuilder();
        String text = null;
        for (ContentBlock b : m.getContentList()) {
          if (b.hasText()) {
            text = text == null ? b.getText().getText() : text + b.getText().getText();
          } else if (b.hasThinking()) {
            thinking.append(b.getThinking().getThinking());
          } else if (b.hasToolCall()) {
            requests.add(ToolExecutionRequest.builder()
                .id(b.getToolCall().getId())
                .name(b.getToolCall().getName())
                .arguments(b.getToolCall().getArgumentsJson().isEmpty() ? "{}" : b.getToolCall().getArgumentsJson())
                .build());
          }
        }
        return AiMessage.builder()
            .text(text)
            .thinking(thinking.length() == 0 ? null : thinking.toString())
            .toolExecutionRequests(requests)
            .build();
      }
      case ROLE_TOOL_RESULT -> {
        return ToolExecutionResultMessage.builder()
            .id(m.getToolCallId())
            .toolName(m.getToolName())
            .text(Messages.text(m))
            .isError(m.getIsError() ? Boolean.TRUE : null)
            .build();
      }
      default -> {
        List<Content> contents = new ArrayList<>();
        for (ContentBlock b : m.getContentList()) {
          if (b.hasText()) {
            contents.add(TextContent.from(b.getText().getText()));
          } else if (b.hasImage()) {
            contents.add(dev.langchain4j.data.message.ImageContent.from(
                Base64.getEncoder().encodeToString(b.getImage().getData().toByteArray()),
                b.getImage().getMimeType()));
          }
        }
        if (contents.isEmpty()) {
          contents.add(TextContent.from(""));
        }
        String name = m.getMetadataOrDefault(NAME_KEY, null);
        return name == null ? UserMessage.from(contents) : UserMessage.from(name, contents);
      }
    }
  }

  /** What a stored message is, seen through LangChain4j: its conversion there and back. */
  static List<Message> canonical(List<Message> entry) {
    List<Message> out = new ArrayList<>();
    for (Message m : entry) {
      out.add(toCtxwarden(fromCtxwarden(m)));
    }
    return out;
  }

  private static ContentBlock image(Image image) {
    if (image.base64Data() == null || image.mimeType() == null) {
      throw new IllegalArgumentException("ctxwarden stores images given as base64 data only, not " + image.url());
    }
    return ContentBlock.newBuilder()
        .setImage(ImageContent.newBuilder()
            .setMimeType(image.mimeType())
            .setData(ByteString.copyFrom(Base64.getDecoder().decode(image.base64Data()))))
        .build();
  }

  private static String nullToEmpty(String s) {
    return s == null ? "" : s;
  }
}
