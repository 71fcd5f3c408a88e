package dev.ctxwarden.langchain4j;

import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.memory.ConversationStore;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.store.memory.chat.ChatMemoryStore;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A LangChain4j {@link ChatMemoryStore} over ctxwarden sessions, for {@code
 * MessageWindowChatMemory} / {@code TokenWindowChatMemory} and so {@code AiServices}:
 *
 * <pre>{@code
 * ChatMemoryStore store = CtxwardenChatMemoryStore.builder(client).build();
 * Assistant assistant = AiServices.builder(Assistant.class)
 *     .chatModel(model)
 *     .tools(new Tools())
 *     .chatMemoryProvider(id -> MessageWindowChatMemory.builder()
 *         .id(id).maxMessages(20).chatMemoryStore(store).build())
 *     .build();
 * }</pre>
 *
 * <p>A memory is the session {@code langchain4j:<memory id>} ({@code memoryId.toString()}, see
 * {@link dev.ctxwarden.client.SessionKeys}), created on its first update from the builder's
 * template. Tool execution requests are ctxwarden tool calls and tool execution results
 * ctxwarden tool results, so the session's own model input pairs them.
 *
 * <ul>
 *   <li>{@link #updateMessages} makes the list the memory's messages without deleting anything:
 *       what is new is appended; messages the window evicted are hidden from this store (they stay
 *       in ctxwarden's history and model input); messages after the last one the new list keeps
 *       are rolled back ({@code RollbackTurn} with {@code to_seq}). See {@link ConversationStore}.
 *   <li>{@link #getMessages} returns the list as updated, less any tool result whose request was
 *       evicted.
 *   <li>{@link #deleteMessages} soft-deletes the session; its history stays on the server.
 * </ul>
 *
 * Messages are mapped by {@link LangChain4jMessages}.
 */
public final class CtxwardenChatMemoryStore implements ChatMemoryStore {
  /** The session ID namespace of LangChain4j memories. */
  public static final String DEFAULT_NAMESPACE = "langchain4j";

  private final ConversationStore store;

  private CtxwardenChatMemoryStore(ConversationStore store) {
    this.store = store;
  }

  /** A builder of a store that uses {@code client}. */
  public static Builder builder(CtxwardenClient client) {
    return new Builder(client);
  }

  /** The ctxwarden session ID of a memory. */
  public String sessionId(Object memoryId) {
    return store.sessionId(memoryId.toString());
  }

  /** The IDs ({@code toString()}) of the memories of this namespace (see {@link ConversationStore#conversationIds}). */
  public List<String> memoryIds() {
    return store.conversationIds();
  }

  @Override
  public List<ChatMessage> getMessages(Object memoryId) {
    List<ChatMessage> out = new ArrayList<>();
    for (List<Message> entry : store.read(id(memoryId))) {
      out.add(LangChain4jMessages.fromCtxwarden(entry.get(0)));
    }
    return out;
  }

  @Override
  public void updateMessages(Object memoryId, List<ChatMessage> messages) {
    Objects.requireNonNull(messages, "messages");
    List<List<Message>> entries = new ArrayList<>();
    for (ChatMessage m : messages) {
      entries.add(List.of(LangChain4jMessages.toCtxwarden(Objects.requireNonNull(m, "a message"))));
    }
    store.replace(id(memoryId), entries);
  }

  @Override
  public void deleteMessages(Object memoryId) {
    store.delete(id(memoryId));
  }

  private static String id(Object memoryId) {
    return Objects.requireNonNull(memoryId, "memoryId").toString();
  }

  /** Configures a {@link CtxwardenChatMemoryStore}. */
  public static final class Builder {
    private final CtxwardenClient client;
    private String namespace = DEFAULT_NAMESPACE;
    private Session template = Session.getDefaultInstance();

    private Builder(CtxwardenClient client) {
      this.client = Objects.requireNonNull(client, "client");
    }

    /** The session ID namespace ({@value #DEFAULT_NAMESPACE} by default). */
    public Builder namespace(String namespace) {
      this.namespace = Objects.requireNonNull(namespace, "namespace");
      return this;
    }

    /**
     * The settings of new sessions (model, policy, tools, user_id, project_id, labels; a system
     * message stored later sets system_prompt). user_id and project_id also scope {@link #memoryIds}.
     */
    public Builder sessionTemplate(Session template) {
      this.template = Objects.requireNonNull(template, "template");
      return this;
    }

    /** The store. */
    public CtxwardenChatMemoryStore build() {
      return new CtxwardenChatMemoryStore(
          new ConversationStore(client, namespace, template, LangChain4jMessages::canonical));
    }
  }
}
