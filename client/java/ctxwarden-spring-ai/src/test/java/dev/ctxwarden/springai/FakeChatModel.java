package dev.ctxwarden.springai;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.model.Generation;
import org.springframework.ai.chat.prompt.Prompt;

/**
 * A scripted model: a user message that asks for the weather of cities gets one tool call per
 * city (fresh call IDs); tool responses get an answer quoting them; anything else an echo. Every
 * prompt is recorded with the orphans it holds (a tool response without its call before it, a
 * tool call without its response after it).
 */
final class FakeChatModel implements ChatModel {
  final List<List<Message>> prompts = new ArrayList<>();
  final List<String> orphans = new ArrayList<>();
  private final AtomicInteger ids = new AtomicInteger();

  @Override
  public ChatResponse call(Prompt prompt) {
    List<Message> messages = prompt.getInstructions();
    prompts.add(List.copyOf(messages));
    orphans.addAll(orphansOf(messages));
    Message last = messages.get(messages.size() - 1);
    AssistantMessage answer;
    if (last instanceof UserMessage user && user.getText().startsWith("weather:")) {
      List<AssistantMessage.ToolCall> calls = new ArrayList<>();
      for (String city : user.getText().substring("weather:".length()).split(",")) {
        calls.add(new AssistantMessage.ToolCall("call_" + ids.incrementAndGet(), "function", "weather",
            "{\"city\":\"" + city.trim() + "\"}"));
      }
      answer = AssistantMessage.builder().content("").toolCalls(calls).build();
    } else if (last instanceof ToolResponseMessage tools) {
      answer = new AssistantMessage("forecast: " + String.join("; ",
          tools.getResponses().stream().map(ToolResponseMessage.ToolResponse::responseData).toList()));
    } else {
      answer = new AssistantMessage("echo " + last.getText() + " (prompt of " + messages.size() + ")");
    }
    return new ChatResponse(List.of(new Generation(answer)));
  }

  /** The orphaned tool calls and tool responses of a prompt. */
  static List<String> orphansOf(List<Message> messages) {
    List<String> found = new ArrayList<>();
    Set<String> called = new HashSet<>();
    Set<String> open = new HashSet<>();
    for (Message m : messages) {
      if (m instanceof ToolResponseMessage tools) {
        for (ToolResponseMessage.ToolResponse r : tools.getResponses()) {
          if (!called.contains(r.id())) {
            found.add("response without call: " + r.id());
          }
          open.remove(r.id());
        }
        continue;
      }
      open.forEach(id -> found.add("call without response: " + id));
      open.clear();
      if (m instanceof AssistantMessage a) {
        for (AssistantMessage.ToolCall c : a.getToolCalls()) {
          called.add(c.id());
          open.add(c.id());
        }
      }
    }
    open.forEach(id -> found.add("call without response: " + id));
    return found;
  }
}
