package dev.ctxwarden.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ctxwarden.v1.ContextServiceOuterClass.ModelInput;
import ctxwarden.v1.ContextServiceOuterClass.Notice;
import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.testing.TestServer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.client.advisor.MessageChatMemoryAdvisor;
import org.springframework.ai.chat.memory.ChatMemory;
import org.springframework.ai.chat.memory.ChatMemoryRepository;
import org.springframework.ai.chat.memory.InMemoryChatMemoryRepository;
import org.springframework.ai.chat.memory.MessageWindowChatMemory;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.content.Media;
import org.springframework.ai.model.tool.DefaultToolCallingManager;
import org.springframework.ai.model.tool.ToolCallingChatOptions;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.model.tool.ToolExecutionResult;
import org.springframework.ai.support.ToolCallbacks;
import org.springframework.ai.tool.annotation.Tool;
import org.springframework.util.MimeTypeUtils;

/**
 * CtxwardenChatMemoryRepository under Spring AI's own components: MessageWindowChatMemory,
 * MessageChatMemoryAdvisor in a ChatClient, and the documented user-controlled tool loop with
 * DefaultToolCallingManager, 30 turns each, across a server restart.
 */
class SpringAiMemoryTest {
  private static TestServer server;
  private static CtxwardenClient client;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.start();
    client = server.client(null);
  }

  @AfterAll
  static void stop() throws Exception {
    client.close();
    server.close();
  }

  private static void reconnect() throws Exception {
    client.close();
    server.restart();
    client = server.client(null);
  }

  private static CtxwardenChatMemoryRepository repository() {
    return CtxwardenChatMemoryRepository.builder(client)
        .sessionTemplate(Session.newBuilder().setUserId("u-spring").build())
        .build();
  }

  /** A message as text that tells its type, text, tool calls and responses (not metadata). */
  static String describe(Message m) {
    if (m instanceof AssistantMessage a) {
      return "assistant:" + a.getText() + a.getToolCalls();
    }
    if (m instanceof ToolResponseMessage t) {
      return "tool:" + t.getResponses();
    }
    if (m instanceof UserMessage u) {
      return "user:" + u.getText() + u.getMedia().stream().map(x -> x.getMimeType() + "/" + ((byte[]) x.getData()).length).toList();
    }
    return m.getMessageType() + ":" + m.getText();
  }

  static List<String> describe(List<Message> ms) {
    return ms.stream().map(SpringAiMemoryTest::describe).toList();
  }

  @Test
  void repositoryRoundTrip() {
    CtxwardenChatMemoryRepository repo = repository();
    List<Message> messages = List.of(
        new SystemMessage("You are a weather bot."),
        UserMessage.builder().text("What is this?")
            .media(new Media(MimeTypeUtils.IMAGE_PNG, new org.springframework.core.io.ByteArrayResource(new byte[] {(byte) 0x89, 'P', 'N', 'G'})))
            .build(),
        AssistantMessage.builder().content("Checking.").toolCalls(List.of(
            new AssistantMessage.ToolCall("c1", "function", "weather", "{\"city\":\"Paris\"}"),
            new AssistantMessage.ToolCall("c2", "function", "weather", "{\"city\":\"Rome\"}"))).build(),
        ToolResponseMessage.builder().responses(List.of(
            new ToolResponseMessage.ToolResponse("c1", "weather", "sunny"),
            new ToolResponseMessage.ToolResponse("c2", "weather", "rain"))).build(),
        new AssistantMessage("Sunny in Paris, rain in Rome."));
    repo.saveAll("round trip", messages);
    List<Message> back = repo.findByConversationId("round trip");
    assertEquals(describe(messages), describe(back));
    assertInstanceOf(SystemMessage.class, back.get(0));
    assertEquals("You are a weather bot.", client.getSession(repo.sessionId("round trip")).getSystemPrompt());

    assertTrue(repo.findConversationIds().contains("round trip"), repo.findConversationIds().toString());
    repo.deleteByConversationId("round trip");
    assertEquals(List.of(), repo.findByConversationId("round trip"));
    assertFalse(repo.findConversationIds().contains("round trip"));
    repo.deleteByConversationId("round trip"); // nothing left: harmless
  }

  @Test
  void chatClientWithMemoryAdvisorFor30TurnsAcrossARestart() throws Exception {
    String conversation = "advisor-" + System.nanoTime();
    FakeChatModel model = new FakeChatModel();
    int window = 10;
    String previousReply = null;
    for (int turn = 1; turn <= 30; turn++) {
      if (turn == 16) {
        reconnect(); // the conversation lives in ctxwarden, not in this JVM
      }
      ChatMemory memory = MessageWindowChatMemory.builder()
          .chatMemoryRepository(repository()).maxMessages(window).build();
      ChatClient chat = ChatClient.builder(model)
          .defaultAdvisors(MessageChatMemoryAdvisor.builder(memory).build())
          .build();
      String reply = chat.prompt().user("turn " + turn)
          .advisors(a -> a.param(ChatMemory.CONVERSATION_ID, conversation))
          .call().content();
      int expectedPrompt = Math.min(2 * (turn - 1), window) + 1;
      assertEquals("echo turn " + turn + " (prompt of " + expectedPrompt + ")", reply);
      List<Message> prompt = model.prompts.get(model.prompts.size() - 1);
      if (previousReply != null) {
        assertEquals(previousReply, prompt.get(prompt.size() - 2).getText()); // remembered
      }
      previousReply = reply;
    }
    List<Message> memory = repository().findByConversationId(conversation);
    assertEquals(window, memory.size());
    assertEquals("turn 26", memory.get(0).getText());
    assertTrue(memory.get(window - 1).getText().startsWith("echo turn 30"));
    // ctxwarden kept all 60 messages active: its own model input has the whole conversation.
    ModelInput input = client.buildModelInput(repository().sessionId(conversation));
    assertEquals(60, input.getMessagesCount());
    assertEquals("turn 1", dev.ctxwarden.client.Messages.text(input.getMessages(0)));
    assertTrue(model.orphans.isEmpty(), model.orphans.toString());
  }

  /** The tool of the loop. */
  static final class WeatherTools {
    @Tool(description = "The weather of a city")
    String weather(String city) {
      return city + ": " + (city.length() % 2 == 0 ? "sunny" : "rain");
    }
  }

  /**
   * Spring AI's documented user-controlled tool execution with a ChatMemory, 30 turns with tool
   * calls and a window of 7 messages; returns the orphans the model saw.
   */
  private static List<String> toolLoop(java.util.function.Supplier<ChatMemoryRepository> repositories,
      String conversation, boolean restart) throws Exception {
    FakeChatModel model = new FakeChatModel();
    ToolCallingManager tools = DefaultToolCallingManager.builder().build();
    ToolCallingChatOptions options = ToolCallingChatOptions.builder()
        .toolCallbacks(ToolCallbacks.from(new WeatherTools()))
        .internalToolExecutionEnabled(false)
        .build();
    String[] cities = {"Paris", "Rome", "Oslo", "Lima", "Kyoto"};
    for (int turn = 1; turn <= 30; turn++) {
      if (restart && turn == 16) {
        reconnect();
      }
      ChatMemory memory = MessageWindowChatMemory.builder()
          .chatMemoryRepository(repositories.get()).maxMessages(7).build();
      String ask = turn % 3 == 0 ? "hello " + turn
          : "weather:" + cities[turn % 5] + (turn % 2 == 0 ? "," + cities[(turn + 1) % 5] : "");
      memory.add(conversation, new UserMessage(ask));
      Prompt prompt = new Prompt(memory.get(conversation), options);
      ChatResponse response = model.call(prompt);
      memory.add(conversation, response.getResult().getOutput());
      while (response.hasToolCalls()) {
        ToolExecutionResult result = tools.executeToolCalls(prompt, response);
        List<Message> history = result.conversationHistory();
        memory.add(conversation, history.get(history.size() - 1));
        prompt = new Prompt(memory.get(conversation), options);
        response = model.call(prompt);
        memory.add(conversation, response.getResult().getOutput());
      }
      String answer = response.getResult().getOutput().getText();
      if (ask.startsWith("weather:")) {
        assertTrue(answer.startsWith("forecast: ") && answer.contains(cities[turn % 5] + ": "), answer);
      }
    }
    assertEquals(30 + 20, model.prompts.size()); // 20 turns called a tool: two model calls each
    return model.orphans;
  }

  @Test
  void userControlledToolLoopFor30TurnsAcrossARestart() throws Exception {
    String conversation = "tools-" + System.nanoTime();
    List<String> orphans = toolLoop(SpringAiMemoryTest::repository, conversation, true);
    assertEquals(List.of(), orphans);

    List<Message> memory = repository().findByConversationId(conversation);
    assertTrue(memory.size() <= 7, describe(memory).toString());
    assertEquals(List.of(), FakeChatModel.orphansOf(memory));
    // ctxwarden's own model input: everything, every call with its result, nothing made up.
    String sessionId = repository().sessionId(conversation);
    ModelInput input = client.buildModelInput(sessionId);
    assertEquals(client.listMessages(sessionId).size(), input.getMessagesCount());
    assertEquals(30, input.getMessagesList().stream()
        .filter(m -> m.getRole() == ctxwarden.v1.MessageOuterClass.Role.ROLE_USER).count());
    List<String> notices = new ArrayList<>();
    for (Notice n : input.getNoticesList()) {
      notices.add(n.getCode());
    }
    assertFalse(notices.contains("ORPHANED_TOOL_RESULT_OMITTED"), notices.toString());
    assertFalse(notices.contains("SYNTHETIC_TOOL_RESULT"), notices.toString());

    // The same loop on Spring AI's in-memory repository: its window does hand orphaned tool
    // responses to the model, which is what the check above guards against.
    InMemoryChatMemoryRepository inMemory = new InMemoryChatMemoryRepository();
    List<String> inMemoryOrphans = toolLoop(() -> inMemory, "in-memory", false);
    assertFalse(inMemoryOrphans.isEmpty());
  }
}
