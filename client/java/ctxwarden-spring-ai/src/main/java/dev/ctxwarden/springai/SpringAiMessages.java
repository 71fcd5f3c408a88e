package dev.ctxwarden.springai;

import com.google.protobuf.ByteString;
import ctxwarden.v1.MessageOuterClass.ContentBlock;
import ctxwarden.v1.MessageOuterClass.ImageContent;
import ctxwarden.v1.MessageOuterClass.Role;
import ctxwarden.v1.MessageOuterClass.ToolCall;
import dev.ctxwarden.client.Messages;
import dev.ctxwarden.client.memory.ConversationStore;
import java.util.ArrayList;
import java.util.List;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.content.Media;
import org.springframework.util.MimeType;

/**
 * Spring AI messages to ctxwarden messages and back.
 *
 * <ul>
 *   <li>{@link UserMessage}: a USER message, its text and its media given as bytes ({@code
 *       image/*} only) as image blocks;
 *   <li>{@link AssistantMessage}: an ASSISTANT message, its text then its tool calls (id, name,
 *       arguments; the call type comes back as {@code "function"}), stop reason TOOL_USE with
 *       calls, STOP without;
 *   <li>{@link ToolResponseMessage}: one TOOL_RESULT per response (tool_call_id, tool_name, the
 *       response data as text), kept together as one entry;
 *   <li>{@link SystemMessage}: a history-only {@link ConversationStore#systemMessage}, and the
 *       session's system prompt.
 * </ul>
 *
 * Not stored: message metadata and properties (except what the above carry), media given as a
 * URL and non-image media (IllegalArgumentException), an assistant message's media. Read back,
 * a ctxwarden message another client stored keeps what Spring AI can hold: thinking and provider
 * blocks are left out.
 */
public final class SpringAiMessages {
  private SpringAiMessages() {}

  /** A Spring AI message as ctxwarden messages (one, or one per tool response). */
  public static List<ctxwarden.v1.MessageOuterClass.Message> toCtxwarden(Message message) {
    if (message instanceof SystemMessage system) {
      return List.of(ConversationStore.systemMessage(nullToEmpty(system.getText())));
    }
    if (message instanceof UserMessage user) {
      ctxwarden.v1.MessageOuterClass.Message.Builder m =
          ctxwarden.v1.MessageOuterClass.Message.newBuilder().setRole(Role.ROLE_USER);
      String text = nullToEmpty(user.getText());
      if (!text.isEmpty() || user.getMedia().isEmpty()) {
        m.addContent(Messages.text(text));
      }
      for (Media media : user.getMedia()) {
        m.addContent(image(media));
      }
      return List.of(m.build());
    }
    if (message instanceof AssistantMessage assistant) {
      List<ToolCall> calls = new ArrayList<>();
      for (AssistantMessage.ToolCall c : assistant.getToolCalls()) {
        calls.add(Messages.toolCall(c.id(), c.name(), nullToEmpty(c.arguments())));
      }
      ctxwarden.v1.MessageOuterClass.Message m =
          Messages.assistant(nullToEmpty(assistant.getText()), calls.toArray(ToolCall[]::new));
      if (m.getContentCount() == 0) {
        m = m.toBuilder().addContent(Messages.text("")).build();
      }
      return List.of(m);
    }
    if (message instanceof ToolResponseMessage tools) {
      if (tools.getResponses().isEmpty()) {
        throw new IllegalArgumentException("a ToolResponseMessage without responses");
      }
      List<ctxwarden.v1.MessageOuterClass.Message> out = new ArrayList<>();
      for (ToolResponseMessage.ToolResponse r : tools.getResponses()) {
        out.add(Messages.toolResult(r.id(), nullToEmpty(r.name()), nullToEmpty(r.responseData())));
      }
      return out;
    }
    throw new IllegalArgumentException(
        "ctxwarden: cannot store a " + message.getClass().getName() + " (" + message.getMessageType() + ")");
  }

  /** An entry of ctxwarden messages (see {@link #toCtxwarden}) as one Spring AI message. */
  public static Message fromCtxwarden(List<ctxwarden.v1.MessageOuterClass.Message> entry) {
    ctxwarden.v1.MessageOuterClass.Message first = entry.get(0);
    if (ConversationStore.isSystemMessage(first)) {
      return new SystemMessage(Messages.text(first));
    }
    switch (first.getRole()) {
      case ROLE_ASSISTANT -> {
        List<AssistantMessage.ToolCall> calls = new ArrayList<>();
        for (ToolCall c : Messages.toolCalls(first)) {
          String args = c.getArgumentsJson().isEmpty() ? "{}" : c.getArgumentsJson();
          calls.add(new AssistantMessage.ToolCall(c.getId(), "function", c.getName(), args));
        }
        return AssistantMessage.builder().content(Messages.text(first)).toolCalls(calls).build();
      }
      case ROLE_TOOL_RESULT -> {
        List<ToolResponseMessage.ToolResponse> responses = new ArrayList<>();
        for (ctxwarden.v1.MessageOuterClass.Message m : entry) {
          responses.add(new ToolResponseMessage.ToolResponse(m.getToolCallId(), m.getToolName(), Messages.text(m)));
        }
        return ToolResponseMessage.builder().responses(responses).build();
      }
      default -> {
        List<Media> media = new ArrayList<>();
        for (ContentBlock b : first.getContentList()) {
          if (b.hasImage()) {
            media.add(Media.builder()
                .mimeType(MimeType.valueOf(b.getImage().getMimeType()))
                .data(b.getImage().getData().toByteArray())
                .build());
          }
        }
        return UserMessage.builder().text(Messages.text(first)).media(media).build();
      }
    }
  }

  /** What a stored entry is, seen through Spring AI: its conversion there and back. */
  static List<ctxwarden.v1.MessageOuterClass.Message> canonical(
      List<ctxwarden.v1.MessageOuterClass.Message> entry) {
    return toCtxwarden(fromCtxwarden(entry));
  }

  private static ContentBlock image(Media media) {
    MimeType type = media.getMimeType();
    if (!(media.getData() instanceof byte[] bytes) || type == null || !"image".equals(type.getType())) {
      throw new IllegalArgumentException("ctxwarden stores media given as image bytes only, not "
          + type + " " + (media.getData() == null ? "null" : media.getData().getClass().getSimpleName()));
    }
    return ContentBlock.newBuilder()
        .setImage(ImageContent.newBuilder().setMimeType(type.toString()).setData(ByteString.copyFrom(bytes)))
        .build();
  }

  private static String nullToEmpty(String s) {
    return s == null ? "" : s;
  }
}
