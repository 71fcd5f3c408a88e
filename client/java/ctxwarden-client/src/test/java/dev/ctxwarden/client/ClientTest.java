package dev.ctxwarden.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ctxwarden.v1.ContextServiceOuterClass.AppendMessagesRequest;
import ctxwarden.v1.ContextServiceOuterClass.AppendMessagesResponse;
import ctxwarden.v1.ContextServiceOuterClass.Compaction;
import ctxwarden.v1.ContextServiceOuterClass.CompactionPlan;
import ctxwarden.v1.ContextServiceOuterClass.ListMessagesRequest;
import ctxwarden.v1.ContextServiceOuterClass.ModelInput;
import ctxwarden.v1.ContextServiceOuterClass.PrepareCompactionRequest;
import ctxwarden.v1.ContextServiceOuterClass.RecoveryAction;
import ctxwarden.v1.ContextServiceOuterClass.RollbackTurnResponse;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.MessageOuterClass.MessageState;
import ctxwarden.v1.MessageOuterClass.Role;
import ctxwarden.v1.SessionOuterClass.Session;
import ctxwarden.v1.SessionOuterClass.ToolDefinition;
import dev.ctxwarden.client.testing.TestServer;
import io.grpc.Status;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The typed helpers against a real server (extractive summariser, so Compact works). */
class ClientTest {
  private static TestServer server;
  private static CtxwardenClient client;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.start("--summarizer", "extractive");
    client = server.client(null);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.close();
    }
  }

  private static Session newSession() {
    return client.createSession(Session.newBuilder()
        .setSystemPrompt("You are a careful coding agent.")
        .addTools(ToolDefinition.newBuilder().setName("read").setDescription("Read a file")
            .setParametersJson("{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}"))
        .build());
  }

  @Test
  void createAppendBuildRollback() {
    Session s = newSession();
    String sid = s.getSessionId();
    assertFalse(sid.isEmpty());
    assertEquals(0, s.getLastSeq());

    AppendMessagesResponse r = client.appendMessages(sid, Messages.user("What does setup.py do?"));
    assertEquals(1, r.getLastSeq());
    Message call = Messages.assistant("Let me look.", Messages.toolCall("call-1", "read", "{\"path\":\"setup.py\"}"));
    client.appendMessages(sid, call, Messages.toolResult("call-1", "read", "setup(name='demo')"));

    ModelInput in = client.buildModelInput(sid);
    assertEquals("You are a careful coding agent.", in.getSystemPrompt());
    assertEquals(1, in.getToolsCount());
    assertEquals(3, in.getMessagesCount());
    assertEquals(3, in.getLastSeq());
    assertTrue(in.getTokens().getTotalTokens() > 0);
    Message stored = in.getMessages(1);
    assertEquals(Role.ROLE_ASSISTANT, stored.getRole());
    assertEquals("Let me look.", Messages.text(stored));
    assertEquals("call-1", Messages.toolCalls(stored).get(0).getId());
    assertEquals("setup(name='demo')", Messages.text(in.getMessages(2)));

    // A failed model call: rolled back, and ctxwarden says what to do.
    client.appendMessages(sid, Messages.failedAssistant("429 rate limit exceeded"));
    RollbackTurnResponse rb = client.rollbackTurn(sid);
    assertEquals(List.of(4L), rb.getRolledBackSeqsList());
    assertEquals(RecoveryAction.RECOVERY_ACTION_RETRY, rb.getAction());
    assertEquals(3, client.buildModelInput(sid).getMessagesCount());

    // A rewind: everything after seq 1 rolled back, kept in storage.
    client.appendMessages(sid, Messages.assistant("It builds a package."));
    RollbackTurnResponse rw = client.rewindTo(sid, 1);
    assertEquals(List.of(2L, 3L, 5L), rw.getRolledBackSeqsList());
    assertEquals(1, client.listMessages(sid).size());
    List<Message> all = client.listMessages(ListMessagesRequest.newBuilder()
        .setSessionId(sid).setIncludeRolledBack(true).build());
    assertEquals(5, all.size());
    assertEquals(MessageState.MESSAGE_STATE_ROLLED_BACK, all.get(1).getState());
    assertEquals(5, client.getSession(sid).getLastSeq());
  }

  @Test
  void listMessagesPages() {
    String sid = newSession().getSessionId();
    for (int i = 0; i < 5; i++) {
      client.appendMessages(sid, Messages.user("q" + i), Messages.assistant("a" + i));
    }
    List<Message> all = client.listMessages(ListMessagesRequest.newBuilder()
        .setSessionId(sid).setPageSize(3).build());
    assertEquals(10, all.size());
    assertEquals("a4", Messages.text(all.get(9)));
  }

  @Test
  void forkSession() {
    String sid = newSession().getSessionId();
    client.appendMessages(sid, Messages.user("one"), Messages.assistant("1"),
        Messages.user("two"), Messages.assistant("2"));
    Session fork = client.forkSession(sid, 3);
    assertEquals(sid, fork.getParentSessionId());
    assertEquals(2, fork.getParentSeq());
    client.appendMessages(fork.getSessionId(), Messages.user("three instead"));
    List<Message> forked = client.buildModelInput(fork.getSessionId()).getMessagesList();
    assertEquals(List.of("one", "1", "three instead"), forked.stream().map(Messages::text).toList());
    assertEquals(4, client.buildModelInput(sid).getMessagesCount());
  }

  @Test
  void prepareAndCommitCompaction() {
    String sid = newSession().getSessionId();
    for (int i = 0; i < 12; i++) {
      client.appendMessages(sid, Messages.user("question " + i + " " + "lorem ipsum ".repeat(40)),
          Messages.assistant("answer " + i + " " + "dolor sit amet ".repeat(40)));
    }
    CompactionPlan plan = client.prepareCompaction(PrepareCompactionRequest.newBuilder()
        .setSessionId(sid).setKeepRecentTokens(300).build());
    assertTrue(plan.getFirstKeptSeq() > 1);
    assertFalse(plan.getHistoryPrompt().getUser().isEmpty());
    Compaction c = client.commitCompaction(plan, "The user asked 12 questions about lorem ipsum.",
        plan.getSplitTurn() ? "The turn began with a question." : "");
    assertEquals(plan.getFirstKeptSeq(), c.getFirstKeptSeq());
    assertEquals("agent", c.getSummarizer());
    ModelInput in = client.buildModelInput(sid);
    assertEquals(c.getCompactionId(), in.getCompactionId());
    assertTrue(in.getSummary().contains("12 questions"));

    // The server's own (extractive) summariser.
    client.appendMessages(sid, Messages.user("more " + "words ".repeat(400)), Messages.assistant("ok " + "x ".repeat(400)));
    Compaction again = client.compact(ctxwarden.v1.ContextServiceOuterClass.CompactRequest.newBuilder()
        .setSessionId(sid).setKeepRecentTokens(300).build());
    assertEquals("extractive", again.getSummarizer());
  }

  @Test
  void errorReasonsAreSurfaced() {
    CtxwardenException nf = assertThrows(CtxwardenException.class, () -> client.getSession("no-such-session"));
    assertEquals(Status.Code.NOT_FOUND, nf.code());
    assertEquals("SESSION_NOT_FOUND", nf.reason());
    assertEquals(CtxwardenException.ERROR_DOMAIN, nf.domain());
    assertTrue(nf.toString().contains("SESSION_NOT_FOUND"), nf.toString());

    String sid = newSession().getSessionId();
    client.appendMessages(sid, Messages.user("hi"));
    CtxwardenException stale = assertThrows(CtxwardenException.class, () -> client.appendMessages(
        AppendMessagesRequest.newBuilder().setSessionId(sid).setExpectedLastSeq(7)
            .addMessages(Messages.user("late")).build()));
    assertEquals(Status.Code.ABORTED, stale.code());
    assertEquals("LAST_SEQ_MISMATCH", stale.reason());

    client.appendMessages(sid, Messages.assistant("", Messages.toolCall("c0", "read", "{}")),
        Messages.toolResult("c0", "first"));
    CtxwardenException answered = assertThrows(CtxwardenException.class,
        () -> client.appendMessages(sid, Messages.toolResult("c0", "second")));
    assertEquals(Status.Code.FAILED_PRECONDITION, answered.code());
    assertEquals("TOOL_CALL_ALREADY_ANSWERED", answered.reason());

    CtxwardenException badJson = assertThrows(CtxwardenException.class, () -> client.appendMessages(sid,
        Messages.assistant("", Messages.toolCall("c1", "read", "{not json"))));
    assertEquals(Status.Code.INVALID_ARGUMENT, badJson.code());
    assertEquals("INVALID_JSON", badJson.reason());
    assertFalse(badJson.fieldViolations().isEmpty());
    assertTrue(badJson.fieldViolations().get(0).getField().contains("arguments_json"),
        badJson.fieldViolations().toString());

    CtxwardenException exists = assertThrows(CtxwardenException.class,
        () -> client.createSession(sid, Session.getDefaultInstance()));
    assertEquals(Status.Code.ALREADY_EXISTS, exists.code());
    assertEquals("SESSION_ALREADY_EXISTS", exists.reason());

    // Raw stubs: the same details through CtxwardenException.from / reasonOf.
    Exception raw = assertThrows(Exception.class, () -> client.stub().getSession(
        ctxwarden.v1.ContextServiceOuterClass.GetSessionRequest.newBuilder().setSessionId("nope").build()));
    assertEquals("SESSION_NOT_FOUND", CtxwardenException.reasonOf(raw));
  }
}
