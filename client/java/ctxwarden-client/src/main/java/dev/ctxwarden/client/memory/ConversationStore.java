package dev.ctxwarden.client.memory;

import com.google.protobuf.FieldMask;
import com.google.protobuf.ListValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import ctxwarden.v1.ContextServiceOuterClass.AppendMessagesRequest;
import ctxwarden.v1.ContextServiceOuterClass.ListMessagesRequest;
import ctxwarden.v1.ContextServiceOuterClass.ListSessionsRequest;
import ctxwarden.v1.ContextServiceOuterClass.MessageView;
import ctxwarden.v1.ContextServiceOuterClass.RollbackTurnRequest;
import ctxwarden.v1.ContextServiceOuterClass.StateDelta;
import ctxwarden.v1.ContextServiceOuterClass.UpdateSessionRequest;
import ctxwarden.v1.MessageOuterClass.ContentBlock;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.MessageOuterClass.MessageVisibility;
import ctxwarden.v1.MessageOuterClass.Role;
import ctxwarden.v1.MessageOuterClass.StopReason;
import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.CtxwardenException;
import dev.ctxwarden.client.Messages;
import dev.ctxwarden.client.SessionKeys;
import io.grpc.Status;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.function.UnaryOperator;

/**
 * Keeps a framework's conversation, a list of messages the framework reads whole and replaces
 * whole (Spring AI's {@code ChatMemoryRepository}, LangChain4j's {@code ChatMemoryStore}), in a
 * ctxwarden session that never forgets: the framework-neutral part of the adapters.
 *
 * <p>A conversation is the session {@link SessionKeys#sessionKey sessionKey(namespace,
 * conversationId)}, created on the first write from a template. A framework message is an
 * <em>entry</em>: one ctxwarden message, or several (a Spring AI tool-response message with two
 * responses is two tool results) marked with {@value #GROUP_KEY} metadata {@code "i/n"}.
 *
 * <h2>What {@link #replace} does with a new list</h2>
 *
 * It compares the new list with the entries {@link #read} returns (on content, role, tool call
 * IDs and metadata) and finds the longest head of the new list that the stored entries contain in
 * order, matched as late as possible. Then:
 *
 * <ul>
 *   <li>the rest of the new list is <b>appended</b>;
 *   <li>stored entries <b>before</b> the last matched one that the new list left out were evicted
 *       (a message window moved on): they are <b>hidden</b> from this view, recorded in the
 *       session's state under {@value #HIDDEN_KEY}, and stay active in ctxwarden (its model
 *       input and compaction still see them);
 *   <li>stored entries <b>after</b> the last matched one were replaced (a regenerated answer, an
 *       edited last message): they are <b>rolled back</b> ({@code RollbackTurn} with {@code
 *       to_seq}), kept in storage and listed with {@code include_rolled_back};
 *   <li>a new list that keeps none of the stored entries hides them all (a window that moved past
 *       everything); an empty new list rolls them all back.
 * </ul>
 *
 * The rollback and the append are two calls; each is conditional on the session's last_seq
 * ({@code expected_last_seq}), and a concurrent writer makes the whole replace start over (up to
 * 5 times). Nothing is ever deleted.
 *
 * <h2>What {@link #read} returns</h2>
 *
 * The session's active messages in seq order, less: hidden entries; failed assistant messages
 * (STOP_REASON_ERROR/ABORTED); history-only messages other than {@link #systemMessage}s; and a
 * tool result whose tool call is not in the view before it (its call was evicted), so no orphaned
 * tool result reaches a model.
 *
 * <p>A system message ({@link #systemMessage}) is stored where the framework put it as a
 * history-only message, and the session's {@code system_prompt} follows the newest one a replace
 * carries, so the session's own model input has it too.
 */
public final class ConversationStore {
  /** Metadata of the messages of one multi-message entry: {@code "i/n"}, 0-based. */
  public static final String GROUP_KEY = "ctxwarden.group";

  /** Metadata that marks a framework's system message (value {@code "true"}). */
  public static final String SYSTEM_KEY = "ctxwarden.system_message";

  /** The session state key holding the hidden seq ranges ({@code [[from, to], ...]}). */
  public static final String HIDDEN_KEY = "ctxwarden.hidden_seqs";

  private static final int ATTEMPTS = 5;

  private final CtxwardenClient client;
  private final String namespace;
  private final Session template;
  private final UnaryOperator<List<Message>> canonical;

  /**
   * A store of the conversations of {@code namespace} (e.g. {@code "spring-ai"}). New sessions
   * are made from {@code template} (system prompt, model, policy, user_id, project_id, labels);
   * {@link #conversationIds} lists the sessions of the template's user_id and project_id.
   *
   * <p>{@code canonical} maps a stored entry to what the framework would write back for it (its
   * conversion to a framework message and back): what a framework cannot hold (e.g. thinking
   * blocks another client stored) then does not make a stored entry differ from the framework's
   * copy of it. {@code null}: the identity.
   */
  public ConversationStore(
      CtxwardenClient client,
      String namespace,
      Session template,
      UnaryOperator<List<Message>> canonical) {
    this.client = Objects.requireNonNull(client, "client");
    SessionKeys.sessionKey(namespace); // validates the namespace
    this.namespace = namespace;
    this.template = template == null ? Session.getDefaultInstance() : template;
    this.canonical = canonical == null ? UnaryOperator.identity() : canonical;
  }

  /** The client. */
  public CtxwardenClient client() {
    return client;
  }

  /** The ctxwarden session ID of a conversation. */
  public String sessionId(String conversationId) {
    return SessionKeys.sessionKey(namespace, conversationId);
  }

  /** A framework system message: history-only, marked with {@value #SYSTEM_KEY}. */
  public static Message systemMessage(String text) {
    return Message.newBuilder()
        .setRole(Role.ROLE_USER)
        .setVisibility(MessageVisibility.MESSAGE_VISIBILITY_HISTORY_ONLY)
        .addContent(Messages.text(text))
        .putMetadata(SYSTEM_KEY, "true")
        .build();
  }

  /** Whether {@code m} is a {@link #systemMessage}. */
  public static boolean isSystemMessage(Message m) {
    return "true".equals(m.getMetadataOrDefault(SYSTEM_KEY, ""));
  }

  /** The conversations of this namespace (sessions of the template's user and project). */
  public List<String> conversationIds() {
    ListSessionsRequest request =
        ListSessionsRequest.newBuilder()
            .setUserId(template.getUserId())
            .setProjectId(template.getProjectId())
            .setPageSize(1000)
            .build();
    List<String> ids = new ArrayList<>();
    String prefix = namespace + ":";
    for (Session s : client.listAllSessions(request)) {
      String id = s.getSessionId();
      if (!id.startsWith(prefix)) {
        continue;
      }
      try {
        List<String> parts = SessionKeys.split(id);
        if (parts.size() == 2) {
          ids.add(parts.get(1));
        }
      } catch (IllegalArgumentException notOurs) {
        // A session of this namespace made by hand with an ID no key has: not a conversation.
      }
    }
    return ids;
  }

  /** The conversation's entries as the framework last saved them (see the class comment). */
  public List<List<Message>> read(String conversationId) {
    Snapshot s = load(sessionId(conversationId));
    List<List<Message>> out = new ArrayList<>();
    for (Entry e : s.visible) {
      out.add(e.messages);
    }
    return out;
  }

  /**
   * Makes the conversation's entries {@code entries} (see the class comment): appends what is new,
   * hides what a window evicted, rolls back what was replaced. Each entry is one framework message
   * as ctxwarden messages; entries of several messages get {@value #GROUP_KEY} metadata here.
   */
  public void replace(String conversationId, List<List<Message>> entries) {
    String sessionId = sessionId(conversationId);
    List<List<Message>> marked = new ArrayList<>();
    for (List<Message> entry : entries) {
      marked.add(mark(entry));
    }
    for (int attempt = 1; ; attempt++) {
      try {
        replaceOnce(sessionId, marked);
        return;
      } catch (CtxwardenException e) {
        boolean raced =
            e.code() == Status.Code.ABORTED
                || (e.code() == Status.Code.ALREADY_EXISTS && attempt == 1);
        if (!raced || attempt >= ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /** Soft-deletes the conversation's session (its history stays on the server). */
  public void delete(String conversationId) {
    try {
      client.deleteSession(sessionId(conversationId));
    } catch (CtxwardenException e) {
      if (e.code() != Status.Code.NOT_FOUND) {
        throw e;
      }
    }
  }

  private static List<Message> mark(List<Message> entry) {
    if (entry.isEmpty()) {
      throw new IllegalArgumentException("an entry has at least one message");
    }
    if (entry.size() == 1) {
      return List.of(entry.get(0).toBuilder().removeMetadata(GROUP_KEY).build());
    }
    List<Message> out = new ArrayList<>();
    for (int i = 0; i < entry.size(); i++) {
      out.add(entry.get(i).toBuilder().putMetadata(GROUP_KEY, i + "/" + entry.size()).build());
    }
    return out;
  }

  private void replaceOnce(String sessionId, List<List<Message>> entries) {
    Snapshot s = load(sessionId);
    List<Entry> visible = s.visible;
    List<List<Message>> newKeys = new ArrayList<>();
    for (List<Message> entry : entries) {
      newKeys.add(key(entry));
    }

    // The longest head of the new list that the view contains in order, matched as late as possible.
    int[] pos = new int[0];
    for (int j = entries.size(); j > 0; j--) {
      pos = embedLatest(visible, newKeys, j);
      if (pos != null) {
        break;
      }
      pos = new int[0];
    }
    int matched = pos.length;
    int last = matched > 0 ? pos[matched - 1] : -1;

    List<long[]> hidden = new ArrayList<>(s.hidden);
    Long rollbackTo = null;
    if (matched == 0 && !entries.isEmpty()) {
      for (Entry e : visible) {
        hidden.add(new long[] {e.firstSeq(), e.lastSeq()});
      }
    } else {
      Set<Integer> kept = new HashSet<>();
      for (int p : pos) {
        kept.add(p);
      }
      for (int i = 0; i < last; i++) {
        if (!kept.contains(i)) {
          hidden.add(new long[] {visible.get(i).firstSeq(), visible.get(i).lastSeq()});
        }
      }
      if (last + 1 < visible.size()) {
        rollbackTo = visible.get(last + 1).firstSeq() - 1;
      }
    }
    if (rollbackTo != null) {
      long to = rollbackTo;
      hidden.removeIf(r -> r[0] > to);
      for (long[] r : hidden) {
        r[1] = Math.min(r[1], to);
      }
    }
    hidden = merge(hidden);

    List<Message> toAppend = new ArrayList<>();
    for (int i = matched; i < entries.size(); i++) {
      toAppend.addAll(entries.get(i));
    }
    String systemPrompt = null;
    for (List<Message> entry : entries) {
      if (isSystemMessage(entry.get(0))) {
        systemPrompt = Messages.text(entry.get(0));
      }
    }

    if (s.session == null) {
      Session.Builder fresh = template.toBuilder();
      if (systemPrompt != null) {
        fresh.setSystemPrompt(systemPrompt);
      }
      s = new Snapshot(client.createSession(sessionId, fresh.build()), List.of(), List.of());
    } else if (systemPrompt != null && !systemPrompt.equals(s.session.getSystemPrompt())) {
      client.updateSession(
          UpdateSessionRequest.newBuilder()
              .setSession(Session.newBuilder().setSessionId(sessionId).setSystemPrompt(systemPrompt))
              .setUpdateMask(FieldMask.newBuilder().addPaths("system_prompt"))
              .build());
    }
    long lastSeq = s.session.getLastSeq();
    if (rollbackTo != null) {
      client.rollbackTurn(
          RollbackTurnRequest.newBuilder()
              .setSessionId(sessionId)
              .setToSeq(rollbackTo)
              .setExpectedLastSeq(lastSeq)
              .build());
    }
    boolean hiddenChanged = !sameRanges(hidden, s.hidden);
    if (toAppend.isEmpty() && !hiddenChanged) {
      return;
    }
    AppendMessagesRequest.Builder append =
        AppendMessagesRequest.newBuilder()
            .setSessionId(sessionId)
            .addAllMessages(toAppend)
            .setExpectedLastSeq(lastSeq)
            .setView(MessageView.MESSAGE_VIEW_BASIC);
    if (hiddenChanged) {
      append.setStateDelta(
          StateDelta.newBuilder()
              .setSession(Struct.newBuilder().putFields(HIDDEN_KEY, rangesValue(hidden))));
    }
    client.appendMessages(append.build());
  }

  /**
   * Positions in {@code visible} of {@code keys[0..j)}, each as late as possible, or null when
   * they are not all there in order.
   */
  private static int[] embedLatest(List<Entry> visible, List<List<Message>> keys, int j) {
    int[] pos = new int[j];
    int v = visible.size() - 1;
    for (int k = j - 1; k >= 0; k--) {
      while (v >= 0 && !visible.get(v).key.equals(keys.get(k))) {
        v--;
      }
      if (v < 0) {
        return null;
      }
      pos[k] = v--;
    }
    return pos;
  }

  // Reading.

  private record Entry(List<Message> messages, List<Message> key) {
    long firstSeq() {
      return messages.get(0).getSeq();
    }

    long lastSeq() {
      return messages.get(messages.size() - 1).getSeq();
    }
  }

  private record Snapshot(Session session, List<Entry> visible, List<long[]> hidden) {}

  private Snapshot load(String sessionId) {
    Session session;
    try {
      session = client.getSession(sessionId);
    } catch (CtxwardenException e) {
      if (e.code() == Status.Code.NOT_FOUND) {
        return new Snapshot(null, List.of(), List.of());
      }
      throw e;
    }
    List<long[]> hidden = ranges(session.getState().getFieldsOrDefault(HIDDEN_KEY, null));
    ListMessagesRequest.Builder list =
        ListMessagesRequest.newBuilder().setSessionId(sessionId).setPageSize(1000);
    if (!hidden.isEmpty() && hidden.get(0)[0] <= 1) {
      list.setAfterSeq(hidden.get(0)[1]); // the hidden head is not read at all
    }
    List<Message> messages = client.listMessages(list.build());
    // The session may have moved on between the two reads: the view is that of the messages.
    List<Entry> entries = new ArrayList<>();
    List<Message> group = new ArrayList<>();
    int groupSize = 0;
    for (Message m : messages) {
      if (!isOurs(m) || isHidden(m.getSeq(), hidden)) {
        continue;
      }
      int[] part = part(m);
      if (part == null) {
        group.clear(); // an incomplete group (part of it rolled back or hidden) is left out
        entries.add(new Entry(List.of(m), key(mark(canonical.apply(List.of(m))))));
      } else if (part[0] == 0) {
        group.clear();
        group.add(m);
        groupSize = part[1];
      } else if (!group.isEmpty() && part[0] == group.size() && part[1] == groupSize) {
        group.add(m);
      } else {
        group.clear();
        continue;
      }
      if (!group.isEmpty() && group.size() == groupSize) {
        List<Message> whole = List.copyOf(group);
        entries.add(new Entry(whole, key(mark(canonical.apply(whole)))));
        group.clear();
      }
    }
    return new Snapshot(session, withoutOrphans(entries), hidden);
  }

  /** Whether a stored message belongs in a framework's view at all. */
  private static boolean isOurs(Message m) {
    if (m.getVisibility() == MessageVisibility.MESSAGE_VISIBILITY_HISTORY_ONLY) {
      return isSystemMessage(m);
    }
    return !(m.getRole() == Role.ROLE_ASSISTANT
        && (m.getStopReason() == StopReason.STOP_REASON_ERROR
            || m.getStopReason() == StopReason.STOP_REASON_ABORTED));
  }

  private static List<Entry> withoutOrphans(List<Entry> entries) {
    Set<String> calls = new HashSet<>();
    List<Entry> out = new ArrayList<>();
    for (Entry e : entries) {
      boolean orphan = false;
      for (Message m : e.messages) {
        if (m.getRole() == Role.ROLE_TOOL_RESULT && !calls.contains(m.getToolCallId())) {
          orphan = true;
        }
      }
      if (orphan) {
        continue;
      }
      for (Message m : e.messages) {
        for (ContentBlock b : m.getContentList()) {
          if (b.hasToolCall()) {
            calls.add(b.getToolCall().getId());
          }
        }
      }
      out.add(e);
    }
    return out;
  }

  private static int[] part(Message m) {
    String v = m.getMetadataOrDefault(GROUP_KEY, "");
    int slash = v.indexOf('/');
    if (slash < 0) {
      return null;
    }
    try {
      int i = Integer.parseInt(v.substring(0, slash));
      int n = Integer.parseInt(v.substring(slash + 1));
      return i >= 0 && i < n ? new int[] {i, n} : null;
    } catch (NumberFormatException e) {
      return null;
    }
  }

  /**
   * What two entries are compared on: their messages without what the server assigns (seq, state,
   * token count, times, message_id) and without the assistant's bookkeeping (stop reason, usage,
   * model, provider, error).
   */
  private static List<Message> key(List<Message> entry) {
    List<Message> key = new ArrayList<>();
    for (Message m : entry) {
      Message.Builder b =
          m.toBuilder()
              .clearSeq()
              .clearMessageId()
              .clearState()
              .clearTokenCount()
              .clearCreateTime()
              .clearStopReason()
              .clearUsage()
              .clearModel()
              .clearProvider()
              .clearErrorMessage();
      if (b.getVisibility() == MessageVisibility.MESSAGE_VISIBILITY_MODEL) {
        b.clearVisibility();
      }
      for (int i = 0; i < b.getContentCount(); i++) {
        ContentBlock c = b.getContent(i);
        if (c.hasToolCall() && c.getToolCall().getArgumentsJson().isEmpty()) {
          b.setContent(
              i, c.toBuilder().setToolCall(c.getToolCall().toBuilder().setArgumentsJson("{}")));
        }
      }
      key.add(b.build());
    }
    return key;
  }

  // Hidden ranges.

  private static boolean isHidden(long seq, List<long[]> hidden) {
    for (long[] r : hidden) {
      if (seq >= r[0] && seq <= r[1]) {
        return true;
      }
    }
    return false;
  }

  private static List<long[]> ranges(Value v) {
    List<long[]> out = new ArrayList<>();
    if (v == null || !v.hasListValue()) {
      return out;
    }
    for (Value r : v.getListValue().getValuesList()) {
      if (r.hasListValue() && r.getListValue().getValuesCount() == 2) {
        out.add(
            new long[] {
              (long) r.getListValue().getValues(0).getNumberValue(),
              (long) r.getListValue().getValues(1).getNumberValue()
            });
      }
    }
    return merge(out);
  }

  private static List<long[]> merge(List<long[]> ranges) {
    List<long[]> sorted = new ArrayList<>();
    for (long[] r : ranges) {
      if (r[0] <= r[1]) {
        sorted.add(new long[] {r[0], r[1]});
      }
    }
    sorted.sort((a, b) -> Long.compare(a[0], b[0]));
    List<long[]> out = new ArrayList<>();
    for (long[] r : sorted) {
      long[] prev = out.isEmpty() ? null : out.get(out.size() - 1);
      if (prev != null && r[0] <= prev[1] + 1) {
        prev[1] = Math.max(prev[1], r[1]);
      } else {
        out.add(r);
      }
    }
    return out;
  }

  private static boolean sameRanges(List<long[]> a, List<long[]> b) {
    if (a.size() != b.size()) {
      return false;
    }
    for (int i = 0; i < a.size(); i++) {
      if (a.get(i)[0] != b.get(i)[0] || a.get(i)[1] != b.get(i)[1]) {
        return false;
      }
    }
    return true;
  }

  private static Value rangesValue(List<long[]> ranges) {
    ListValue.Builder list = ListValue.newBuilder();
    for (long[] r : ranges) {
      list.addValues(
          Value.newBuilder()
              .setListValue(
                  ListValue.newBuilder()
                      .addValues(Value.newBuilder().setNumberValue(r[0]))
                      .addValues(Value.newBuilder().setNumberValue(r[1]))));
    }
    return Value.newBuilder().setListValue(list).build();
  }
}
