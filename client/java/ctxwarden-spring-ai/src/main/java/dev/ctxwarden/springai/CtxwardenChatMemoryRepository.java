package dev.ctxwarden.springai;

import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.memory.ConversationStore;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.springframework.ai.chat.memory.ChatMemoryRepository;
import org.springframework.ai.chat.messages.Message;

/**
 * A Spring AI {@link ChatMemoryRepository} over ctxwarden sessions, for {@code
 * MessageWindowChatMemory} and so {@code MessageChatMemoryAdvisor}:
 *
 * <pre>{@code
 * ChatMemoryRepository repository = CtxwardenChatMemoryRepository.builder(client).build();
 * ChatMemory memory = MessageWindowChatMemory.builder().chatMemoryRepository(repository).maxMessages(20).build();
 * ChatClient chat = ChatClient.builder(chatModel)
 *     .defaultAdvisors(MessageChatMemoryAdvisor.builder(memory).build())
 *     .build();
 * }</pre>
 *
 * <p>A conversation is the session {@code spring-ai:<conversation id>} (see {@link
 * dev.ctxwarden.client.SessionKeys}), created on its first save from the builder's template.
 *
 * <ul>
 *   <li>{@link #saveAll} makes the list the conversation's messages without deleting anything:
 *       what is new is appended; messages a window evicted are hidden from this repository
 *       (they stay in ctxwarden's history and model input); messages after the last one the new
 *       list keeps are rolled back ({@code RollbackTurn} with {@code to_seq}). See {@link
 *       ConversationStore} for the exact rules.
 *   <li>{@link #findByConversationId} returns the list as saved, less any tool response whose
 *       tool call was evicted (no orphaned tool result reaches the model).
 *   <li>{@link #deleteByConversationId} soft-deletes the session ({@code DeleteSession}: its
 *       history stays on the server); a later save starts a new, empty session of the same ID.
 *   <li>{@link #findConversationIds} lists the {@code spring-ai:} sessions of the template's
 *       user_id and project_id.
 * </ul>
 *
 * Messages are mapped by {@link SpringAiMessages}.
 */
public final class CtxwardenChatMemoryRepository implements ChatMemoryRepository {
  /** The session ID namespace of Spring AI conversations. */
  public static final String DEFAULT_NAMESPACE = "spring-ai";

  private final ConversationStore store;

  private CtxwardenChatMemoryRepository(ConversationStore store) {
    this.store = store;
  }

  /** A builder of a repository that uses {@code client}. */
  public static Builder builder(CtxwardenClient client) {
    return new Builder(client);
  }

  /** The ctxwarden session ID of a conversation. */
  public String sessionId(String conversationId) {
    return store.sessionId(conversationId);
  }

  @Override
  public List<String> findConversationIds() {
    return store.conversationIds();
  }

  @Override
  public List<Message> findByConversationId(String conversationId) {
    Objects.requireNonNull(conversationId, "conversationId");
    List<Message> out = new ArrayList<>();
    for (List<ctxwarden.v1.MessageOuterClass.Message> entry : store.read(conversationId)) {
      out.add(SpringAiMessages.fromCtxwarden(entry));
    }
    return out;
  }

  @Override
  public void saveAll(String conversationId, List<Message> messages) {
    Objects.requireNonNull(conversationId, "conversationId");
    Objects.requireNonNull(messages, "messages");
    List<List<ctxwarden.v1.MessageOuterClass.Message>> entries = new ArrayList<>();
    for (Message m : messages) {
      entries.add(SpringAiMessages.toCtxwarden(Objects.requireNonNull(m, "a message")));
    }
    store.replace(conversationId, entries);
  }

  @Override
  public void deleteByConversationId(String conversationId) {
    store.delete(Objects.requireNonNull(conversationId, "conversationId"));
  }

  /** Configures a {@link CtxwardenChatMemoryRepository}. */
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
     * message saved later sets system_prompt). user_id and project_id also scope {@link
     * #findConversationIds}.
     */
    public Builder sessionTemplate(Session template) {
      this.template = Objects.requireNonNull(template, "template");
      return this;
    }

    /** The repository. */
    public CtxwardenChatMemoryRepository build() {
      return new CtxwardenChatMemoryRepository(
          new ConversationStore(client, namespace, template, SpringAiMessages::canonical));
    }
  }
}
