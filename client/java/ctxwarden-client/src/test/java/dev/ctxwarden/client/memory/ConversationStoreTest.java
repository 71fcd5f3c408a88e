package dev.ctxwarden.client.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ctxwarden.v1.ContextServiceOuterClass.ListMessagesRequest;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.MessageOuterClass.MessageState;
import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.Messages;
import dev.ctxwarden.client.testing.TestServer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The replace-all semantics of ConversationStore against a real server. */
class ConversationStoreTest {
  private static TestServer server;
  private static CtxwardenClient client;
  private static ConversationStore store;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.start();
    client = server.client(null);
    store = new ConversationStore(client, "test", Session.newBuilder().setProjectId("p1").build(), null);
  }

  @AfterAll
  static void stop() throws Exception {
    client.close();
    server.close();
  }

  private static List<List<Message>> entries(Message... messages) {
    List<List<Message>> out = new ArrayList<>();
    for (Message m : messages) {
      out.add(List.of(m));
    }
    return out;
  }

  /** The texts of the view, a tool-result group as "a+b". */
  private static List<String> view(String conversation) {
    List<String> out = new ArrayList<>();
    for (List<Message> e : store.read(conversation)) {
      out.add(String.join("+", e.stream().map(Messages::text).toList()));
    }
    return out;
  }

  /** The texts of the session's model input (what ctxwarden itself would send). */
  private static List<String> modelInput(String conversation) {
    return client.buildModelInput(store.sessionId(conversation)).getMessagesList().stream()
        .map(Messages::text).toList();
  }

  @Test
  void appendsHidesAndRollsBack() {
    String c = "conv 1/é";
    assertEquals("test:conv.201.2F.C3.A9", store.sessionId(c));
    assertEquals(List.of(), view(c));
    Message u1 = Messages.user("u1"), a1 = Messages.assistant("a1"), u2 = Messages.user("u2"),
        a2 = Messages.assistant("a2"), u3 = Messages.user("u3");

    store.replace(c, entries(u1, a1));
    store.replace(c, entries(u1, a1, u2, a2));
    assertEquals(List.of("u1", "a1", "u2", "a2"), view(c));
    assertEquals(4, client.getSession(store.sessionId(c)).getLastSeq());

    // A window evicts the first exchange: hidden here, still in ctxwarden's model input.
    store.replace(c, entries(u2, a2, u3));
    assertEquals(List.of("u2", "a2", "u3"), view(c));
    assertEquals(List.of("u1", "a1", "u2", "a2", "u3"), modelInput(c));

    // The last answer regenerated: the old one is rolled back, the new one appended.
    store.replace(c, entries(u2, a2, u3, Messages.assistant("a3")));
    store.replace(c, entries(u2, a2, u3, Messages.assistant("a3 again")));
    assertEquals(List.of("u2", "a2", "u3", "a3 again"), view(c));
    assertEquals(List.of("u1", "a1", "u2", "a2", "u3", "a3 again"), modelInput(c));
    List<Message> all = client.listMessages(ListMessagesRequest.newBuilder()
        .setSessionId(store.sessionId(c)).setIncludeRolledBack(true).build());
    assertEquals(MessageState.MESSAGE_STATE_ROLLED_BACK, all.get(5).getState());

    // Saving the same list again writes nothing.
    long lastSeq = client.getSession(store.sessionId(c)).getLastSeq();
    store.replace(c, entries(u2, a2, u3, Messages.assistant("a3 again")));
    assertEquals(lastSeq, client.getSession(store.sessionId(c)).getLastSeq());

    // Truncation rolls back; an empty list rolls back what is visible.
    store.replace(c, entries(u2, a2));
    assertEquals(List.of("u2", "a2"), view(c));
    assertEquals(List.of("u1", "a1", "u2", "a2"), modelInput(c));
    store.replace(c, List.of());
    assertEquals(List.of(), view(c));
    assertEquals(List.of("u1", "a1"), modelInput(c));

    // A list that keeps nothing of the stored one: the window moved past everything.
    store.replace(c, entries(u1, a1));
    store.replace(c, entries(Messages.user("fresh")));
    assertEquals(List.of("fresh"), view(c));

    assertTrue(store.conversationIds().contains(c), store.conversationIds().toString());
    store.delete(c);
    assertEquals(List.of(), view(c));
    assertTrue(!store.conversationIds().contains(c));
  }

  @Test
  void duplicatesMatchTheLatestOccurrence() {
    String c = "dups";
    Message hi = Messages.user("hi"), hello = Messages.assistant("hello");
    store.replace(c, entries(hi, hello, hi, hello));
    // The window drops the first two: the view keeps the later copies.
    store.replace(c, entries(hi, hello, Messages.user("bye")));
    assertEquals(List.of("hi", "hello", "bye"), view(c));
    assertEquals(List.of("hi", "hello", "hi", "hello", "bye"), modelInput(c));
  }

  @Test
  void systemMessagesGroupsAndOrphans() {
    String c = "tools";
    Message sys = ConversationStore.systemMessage("Be brief.");
    Message ask = Messages.user("weather in Paris and Rome?");
    Message calls = Messages.assistant("", Messages.toolCall("t1", "weather", "{\"city\":\"Paris\"}"),
        Messages.toolCall("t2", "weather", "{\"city\":\"Rome\"}"));
    List<Message> results = List.of(Messages.toolResult("t1", "weather", "sunny"),
        Messages.toolResult("t2", "weather", "rain"));
    Message answer = Messages.assistant("Sunny in Paris, rain in Rome.");
    List<List<Message>> list = new ArrayList<>(entries(sys, ask, calls));
    list.add(results);
    list.add(List.of(answer));
    store.replace(c, list);
    assertEquals(List.of("Be brief.", "weather in Paris and Rome?", "", "sunny+rain", "Sunny in Paris, rain in Rome."), view(c));
    assertEquals("Be brief.", client.getSession(store.sessionId(c)).getSystemPrompt());
    // The system message is history-only: the model input has it as the system prompt only.
    assertEquals(5, client.buildModelInput(store.sessionId(c)).getMessagesCount()); // ask, calls, 2 results, answer

    // A window that evicts the tool calls but keeps their results: the results are orphans and
    // left out of the view.
    List<List<Message>> evicted = new ArrayList<>(entries(sys));
    evicted.add(results);
    evicted.add(List.of(answer));
    evicted.add(List.of(Messages.user("thanks")));
    store.replace(c, evicted);
    assertEquals(List.of("Be brief.", "Sunny in Paris, rain in Rome.", "thanks"), view(c));

    // A new system message replaces the system prompt.
    store.replace(c, entries(sys, answer, Messages.user("thanks"), ConversationStore.systemMessage("Be verbose.")));
    assertEquals("Be verbose.", client.getSession(store.sessionId(c)).getSystemPrompt());
    assertEquals(List.of("Be brief.", "Sunny in Paris, rain in Rome.", "thanks", "Be verbose."), view(c));
  }

  @Test
  void survivesARestart() throws Exception {
    try (TestServer own = TestServer.start()) {
      ConversationStore s;
      try (CtxwardenClient c1 = own.client(null)) {
        s = new ConversationStore(c1, "test", null, null);
        s.replace("r", entries(Messages.user("1"), Messages.assistant("2"), Messages.user("3")));
        s.replace("r", entries(Messages.assistant("2"), Messages.user("3")));
      }
      own.restart();
      try (CtxwardenClient c2 = own.client(null)) {
        s = new ConversationStore(c2, "test", null, null);
        List<String> texts = s.read("r").stream().map(e -> Messages.text(e.get(0))).toList();
        assertEquals(List.of("2", "3"), texts);
      }
    }
  }
}
