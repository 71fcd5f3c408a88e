package dev.ctxwarden.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ctxwarden.v1.ContextServiceOuterClass.ModelInput;
import ctxwarden.v1.ContextServiceOuterClass.Notice;
import ctxwarden.v1.MessageOuterClass.Role;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.Messages;
import dev.ctxwarden.client.testing.TestServer;
import dev.langchain4j.agent.tool.P;
import dev.langchain4j.agent.tool.Tool;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.data.message.AiMessage;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.ImageContent;
import dev.langchain4j.data.message.SystemMessage;
import dev.langchain4j.data.message.TextContent;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.memory.ChatMemory;
import dev.langchain4j.memory.chat.MessageWindowChatMemory;
import dev.langchain4j.model.chat.ChatModel;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.service.AiServices;
import dev.langchain4j.service.MemoryId;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * CtxwardenChatMemoryStore under LangChain4j's own components: MessageWindowChatMemory and an
 * AiServices tool loop with a scripted ChatModel, 30 turns across a server restart.
 */
class LangChain4jMemoryTest {
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

  private static CtxwardenChatMemoryStore store() {
    return CtxwardenChatMemoryStore.builder(client).build();
  }

  @Test
  void storeRoundTrip() {
    CtxwardenChatMemoryStore store = store();
    List<ChatMessage> messages = List.of(
        SystemMessage.from("You are a weather bot."),
        UserMessage.from("klaus", List.of(TextContent.from("What is this?"),
            ImageContent.from("iVBORw0KGgo=", "image/png"))),
        AiMessage.builder().thinking("The user wants the weather.").text("Checking.")
            .toolExecutionRequests(List.of(
                ToolExecutionRequest.builder().id("c1").name("weather").arguments("{\"city\":\"Paris\"}").build(),
                ToolExecutionRequest.builder().id("c2").name("weather").arguments("{\"city\":\"Rome\"}").build()))
            .build(),
        ToolExecutionResultMessage.from("c1", "weather", "sunny"),
        ToolExecutionResultMessage.builder().id("c2").toolName("weather").text("no data").isError(true).build(),
        AiMessage.from("Sunny in Paris."));
    store.updateMessages(42, messages);
    assertEquals(messages, store.getMessages(42));
    assertEquals("langchain4j:42", store.sessionId(42));
    assertTrue(store.memoryIds().contains("42"));
    store.deleteMessages(42);
    assertEquals(List.of(), store.getMessages(42));
  }

  /** The assistant of the AiServices loop. */
  interface Assistant {
    String chat(@MemoryId String user, @dev.langchain4j.service.UserMessage String message);
  }

  /** The tool of the loop. */
  static final class WeatherTools {
    @Tool("The weather of a city")
    String weather(@P("the city") String city) {
      return city + ": " + (city.length() % 2 == 0 ? "sunny" : "rain");
    }
  }

  /**
   * A scripted model: "weather:A,B" gets one tool call per city (fresh IDs), tool results get a
   * forecast, anything else an echo; records the orphans of every request.
   */
  static final class FakeModel implements ChatModel {
    final List<String> orphans = new ArrayList<>();
    final List<List<ChatMessage>> requests = new ArrayList<>();
    private final AtomicInteger ids = new AtomicInteger();

    @Override
    public ChatResponse doChat(ChatRequest request) {
      List<ChatMessage> messages = request.messages();
      requests.add(List.copyOf(messages));
      orphans.addAll(orphansOf(messages));
      ChatMessage last = messages.get(messages.size() - 1);
      AiMessage answer;
      if (last instanceof UserMessage u && u.singleText().startsWith("weather:")) {
        List<ToolExecutionRequest> calls = new ArrayList<>();
        for (String city : u.singleText().substring(8).split(",")) {
          calls.add(ToolExecutionRequest.builder().id("call_" + ids.incrementAndGet()).name("weather")
              .arguments("{\"city\":\"" + city + "\"}").build());
        }
        answer = AiMessage.from(calls);
      } else if (last instanceof ToolExecutionResultMessage) {
        List<String> results = new ArrayList<>();
        for (int i = messages.size() - 1; i >= 0 && messages.get(i) instanceof ToolExecutionResultMessage r; i--) {
          results.add(0, r.text());
        }
        answer = AiMessage.from("forecast: " + String.join("; ", results));
      } else {
        answer = AiMessage.from("echo " + ((UserMessage) last).singleText() + " (" + messages.size() + " messages)");
      }
      return ChatResponse.builder().aiMessage(answer).build();
    }

    static List<String> orphansOf(List<ChatMessage> messages) {
      List<String> found = new ArrayList<>();
      Set<String> called = new HashSet<>();
      Set<String> open = new HashSet<>();
      for (ChatMessage m : messages) {
        if (m instanceof ToolExecutionResultMessage r) {
          if (!called.contains(r.id())) {
            found.add("result without request: " + r.id());
          }
          open.remove(r.id());
          continue;
        }
        open.forEach(id -> found.add("request without result: " + id));
        open.clear();
        if (m instanceof AiMessage a && a.hasToolExecutionRequests()) {
          for (ToolExecutionRequest r : a.toolExecutionRequests()) {
            called.add(r.id());
            open.add(r.id());
          }
        }
      }
      open.forEach(id -> found.add("request without result: " + id));
      return found;
    }
  }

  private static Assistant assistant(FakeModel model, int window) {
    CtxwardenChatMemoryStore store = store();
    return AiServices.builder(Assistant.class)
        .chatModel(model)
        .tools(new WeatherTools())
        .chatMemoryProvider(id -> MessageWindowChatMemory.builder()
            .id(id).maxMessages(window).chatMemoryStore(store).build())
        .build();
  }

  @Test
  void aiServicesToolLoopFor30TurnsAcrossARestart() throws Exception {
    FakeModel model = new FakeModel();
    String user = "user " + System.nanoTime();
    String[] cities = {"Paris", "Rome", "Oslo", "Lima", "Kyoto"};
    Assistant assistant = assistant(model, 7);
    for (int turn = 1; turn <= 30; turn++) {
      if (turn == 16) {
        client.close();
        server.restart();
        client = server.client(null);
        assistant = assistant(model, 7);
      }
      String ask = turn % 3 == 0 ? "hello " + turn
          : "weather:" + cities[turn % 5] + (turn % 2 == 0 ? "," + cities[(turn + 1) % 5] : "");
      String answer = assistant.chat(user, ask);
      if (ask.startsWith("weather:")) {
        assertTrue(answer.startsWith("forecast: " + cities[turn % 5] + ": "), answer);
      } else {
        assertTrue(answer.startsWith("echo " + ask), answer);
      }
    }
    assertEquals(50, model.requests.size()); // 20 turns called the tool: two model calls each
    assertEquals(List.of(), model.orphans);

    CtxwardenChatMemoryStore store = store();
    List<ChatMessage> memory = store.getMessages(user);
    assertTrue(memory.size() <= 7, memory.toString());
    assertEquals(List.of(), FakeModel.orphansOf(memory));
    // ctxwarden has the whole conversation, every tool call paired with its result.
    ModelInput input = client.buildModelInput(store.sessionId(user));
    assertEquals(client.listMessages(store.sessionId(user)).size(), input.getMessagesCount());
    assertEquals(30, input.getMessagesList().stream().filter(m -> m.getRole() == Role.ROLE_USER).count());
    assertEquals("weather:Rome", Messages.text(input.getMessages(0)));
    List<String> notices = input.getNoticesList().stream().map(Notice::getCode).toList();
    assertFalse(notices.contains("ORPHANED_TOOL_RESULT_OMITTED"), notices.toString());
    assertFalse(notices.contains("SYNTHETIC_TOOL_RESULT"), notices.toString());
  }

  @Test
  void windowKeepsTheSystemMessage() {
    ChatMemory memory = MessageWindowChatMemory.builder()
        .id("sys").maxMessages(3).chatMemoryStore(store()).build();
    memory.add(SystemMessage.from("Be brief."));
    for (int i = 1; i <= 4; i++) {
      memory.add(UserMessage.from("q" + i));
      memory.add(AiMessage.from("a" + i));
    }
    List<ChatMessage> kept = store().getMessages("sys");
    assertEquals(List.of(SystemMessage.from("Be brief."), UserMessage.from("q4"), AiMessage.from("a4")), kept);
    assertEquals("Be brief.", client.getSession(store().sessionId("sys")).getSystemPrompt());
    memory.clear();
    assertEquals(List.of(), store().getMessages("sys"));
  }
}
