package dev.ctxwarden.client;

import ctxwarden.v1.ContextServiceGrpc;
import ctxwarden.v1.ContextServiceOuterClass.AppendMessagesRequest;
import ctxwarden.v1.ContextServiceOuterClass.AppendMessagesResponse;
import ctxwarden.v1.ContextServiceOuterClass.BuildModelInputRequest;
import ctxwarden.v1.ContextServiceOuterClass.CommitCompactionRequest;
import ctxwarden.v1.ContextServiceOuterClass.CompactRequest;
import ctxwarden.v1.ContextServiceOuterClass.Compaction;
import ctxwarden.v1.ContextServiceOuterClass.CompactionPlan;
import ctxwarden.v1.ContextServiceOuterClass.CreateSessionRequest;
import ctxwarden.v1.ContextServiceOuterClass.DeleteSessionRequest;
import ctxwarden.v1.ContextServiceOuterClass.ForkSessionRequest;
import ctxwarden.v1.ContextServiceOuterClass.GetSessionRequest;
import ctxwarden.v1.ContextServiceOuterClass.ListMessagesRequest;
import ctxwarden.v1.ContextServiceOuterClass.ListMessagesResponse;
import ctxwarden.v1.ContextServiceOuterClass.ListSessionsRequest;
import ctxwarden.v1.ContextServiceOuterClass.ListSessionsResponse;
import ctxwarden.v1.ContextServiceOuterClass.ModelInput;
import ctxwarden.v1.ContextServiceOuterClass.PrepareCompactionRequest;
import ctxwarden.v1.ContextServiceOuterClass.RollbackTurnRequest;
import ctxwarden.v1.ContextServiceOuterClass.RollbackTurnResponse;
import ctxwarden.v1.ContextServiceOuterClass.UpdateSessionRequest;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.SessionOuterClass.Session;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * A connection to a ctxwarden server with typed helpers for the common calls.
 *
 * <pre>{@code
 * try (CtxwardenClient client = CtxwardenClient.builder()
 *         .target("127.0.0.1:50051")
 *         .usePlaintext()                    // a sidecar on loopback; TLS is the default
 *         .apiKey(System.getenv("CTXWARDEN_API_KEY"))
 *         .build()) {
 *     Session session = client.createSession(Session.newBuilder().setSystemPrompt("Be brief.").build());
 *     client.appendMessages(session.getSessionId(), Messages.user("hi"));
 *     ModelInput input = client.buildModelInput(session.getSessionId());
 * }
 * }</pre>
 *
 * <p>Every call fails with {@link CtxwardenException} (gRPC status, ErrorInfo reason, RetryInfo
 * delay). Unary calls without a deadline of their own get {@link Builder#defaultDeadline} (30 s
 * by default); calls that fail with UNAVAILABLE are retried (3 attempts, jittered backoff), as in
 * the Go client. Every RPC of {@code ctxwarden.v1.ContextService} is also reachable through
 * {@link #stub()} and {@link #asyncStub()}, with the same credentials and deadlines. Thread-safe;
 * close it when done.
 */
public final class CtxwardenClient implements AutoCloseable {
  /** The address {@code ctxwarden serve} listens on by default. */
  public static final String DEFAULT_TARGET = "127.0.0.1:50051";

  /** The deadline of a unary call that has none of its own. */
  public static final Duration DEFAULT_DEADLINE = Duration.ofSeconds(30);

  /** The server's gRPC message limit (64 MiB), also the client's receive limit. */
  public static final int MAX_MESSAGE_BYTES = 64 << 20;

  private static final String SERVICE = ContextServiceGrpc.SERVICE_NAME;

  private final ManagedChannel channel;
  private final boolean ownsChannel;
  private final ContextServiceGrpc.ContextServiceBlockingStub stub;
  private final ContextServiceGrpc.ContextServiceStub asyncStub;

  private CtxwardenClient(ManagedChannel channel, boolean ownsChannel, Channel intercepted) {
    this.channel = channel;
    this.ownsChannel = ownsChannel;
    this.stub = ContextServiceGrpc.newBlockingStub(intercepted);
    this.asyncStub = ContextServiceGrpc.newStub(intercepted);
  }

  /** A builder; {@link Builder#build()} connects. */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * The blocking stub of every ContextService RPC, with this client's credentials and default
   * deadline. Its calls throw {@link StatusRuntimeException}; {@link CtxwardenException#from}
   * turns one into a {@code CtxwardenException}.
   */
  public ContextServiceGrpc.ContextServiceBlockingStub stub() {
    return stub;
  }

  /** The asynchronous stub (e.g. for the StreamMessages stream), with the same credentials. */
  public ContextServiceGrpc.ContextServiceStub asyncStub() {
    return asyncStub;
  }

  /** The underlying channel (e.g. for the grpc.health.v1 service). */
  public ManagedChannel channel() {
    return channel;
  }

  // Sessions.

  /** Creates a session with a server-made ID from {@code template} (output-only fields ignored). */
  public Session createSession(Session template) {
    return createSession("", template);
  }

  /**
   * Creates a session with the ID {@code sessionId} ({@code ""}: a server-made one). ALREADY_EXISTS
   * (reason SESSION_ALREADY_EXISTS) when a live session has it.
   */
  public Session createSession(String sessionId, Session template) {
    return createSession(
        CreateSessionRequest.newBuilder().setSessionId(sessionId).setSession(template).build());
  }

  /** CreateSession with every field of the request (e.g. request_id). */
  public Session createSession(CreateSessionRequest request) {
    return call(() -> stub.createSession(request));
  }

  /** Returns a session; NOT_FOUND (SESSION_NOT_FOUND) for an unknown or deleted one. */
  public Session getSession(String sessionId) {
    return call(() -> stub.getSession(GetSessionRequest.newBuilder().setSessionId(sessionId).build()));
  }

  /** One page of ListSessions. */
  public ListSessionsResponse listSessions(ListSessionsRequest request) {
    return call(() -> stub.listSessions(request));
  }

  /** Every session that {@code request} selects, all pages, newest first. */
  public List<Session> listAllSessions(ListSessionsRequest request) {
    List<Session> sessions = new ArrayList<>();
    ListSessionsRequest.Builder page = request.toBuilder();
    while (true) {
      ListSessionsResponse resp = listSessions(page.build());
      sessions.addAll(resp.getSessionsList());
      if (resp.getNextPageToken().isEmpty()) {
        return sessions;
      }
      page.setPageToken(resp.getNextPageToken());
    }
  }

  /** UpdateSession (field-mask update of title, system_prompt, tools, model, policy, ...). */
  public Session updateSession(UpdateSessionRequest request) {
    return call(() -> stub.updateSession(request));
  }

  /** Soft-deletes a session: hidden from Get, List and Append; its history is kept. */
  public void deleteSession(String sessionId) {
    call(() -> stub.deleteSession(DeleteSessionRequest.newBuilder().setSessionId(sessionId).build()));
  }

  /**
   * Forks {@code sessionId} just before message {@code atSeq} (0: at its end) into a new session
   * with a server-made ID.
   */
  public Session forkSession(String sessionId, long atSeq) {
    return forkSession(
        ForkSessionRequest.newBuilder().setSessionId(sessionId).setAtSeq(atSeq).build());
  }

  /** ForkSession with every field of the request (new_session_id, request_id). */
  public Session forkSession(ForkSessionRequest request) {
    return call(() -> stub.forkSession(request));
  }

  // Messages.

  /** Appends messages in order, in one atomic append (see {@link Messages} for builders). */
  public AppendMessagesResponse appendMessages(String sessionId, Message... messages) {
    return appendMessages(sessionId, Arrays.asList(messages));
  }

  /** Appends messages in order, in one atomic append. */
  public AppendMessagesResponse appendMessages(String sessionId, List<Message> messages) {
    return appendMessages(
        AppendMessagesRequest.newBuilder().setSessionId(sessionId).addAllMessages(messages).build());
  }

  /** AppendMessages with every field of the request (expected_last_seq, request_id, view, state_delta). */
  public AppendMessagesResponse appendMessages(AppendMessagesRequest request) {
    return call(() -> stub.appendMessages(request));
  }

  /** The session's active history, all pages, in seq order. */
  public List<Message> listMessages(String sessionId) {
    return listMessages(ListMessagesRequest.newBuilder().setSessionId(sessionId).build());
  }

  /** Every message that {@code request} selects (all pages from its page_token on). */
  public List<Message> listMessages(ListMessagesRequest request) {
    List<Message> messages = new ArrayList<>();
    ListMessagesRequest.Builder page = request.toBuilder();
    while (true) {
      ListMessagesResponse resp = call(() -> stub.listMessages(page.build()));
      messages.addAll(resp.getMessagesList());
      if (resp.getNextPageToken().isEmpty()) {
        return messages;
      }
      page.setPageToken(resp.getNextPageToken());
    }
  }

  // Model input, rollback, compaction.

  /** Exactly what to send to the model next, in ctxwarden's own messages. */
  public ModelInput buildModelInput(String sessionId) {
    return buildModelInput(BuildModelInputRequest.newBuilder().setSessionId(sessionId).build());
  }

  /** BuildModelInput with every field of the request (format, auto_compact, resume_token, ...). */
  public ModelInput buildModelInput(BuildModelInputRequest request) {
    return call(() -> stub.buildModelInput(request));
  }

  /**
   * Rolls back the trailing failed assistant turn (append {@link Messages#failedAssistant} first)
   * and says what to do next: retry after a delay, compact and retry, or fail.
   */
  public RollbackTurnResponse rollbackTurn(String sessionId) {
    return rollbackTurn(RollbackTurnRequest.newBuilder().setSessionId(sessionId).build());
  }

  /**
   * Rewinds: rolls back every active message with a seq above {@code toSeq} (0: everything). The
   * messages stay in storage, listed with include_rolled_back.
   */
  public RollbackTurnResponse rewindTo(String sessionId, long toSeq) {
    return rollbackTurn(
        RollbackTurnRequest.newBuilder().setSessionId(sessionId).setToSeq(toSeq).build());
  }

  /** RollbackTurn with every field of the request (provider_error, expected_last_seq, ...). */
  public RollbackTurnResponse rollbackTurn(RollbackTurnRequest request) {
    return call(() -> stub.rollbackTurn(request));
  }

  /**
   * Compacts with the server's summariser. FAILED_PRECONDITION (NO_SUMMARIZER) when the server has
   * none: then use {@link #prepareCompaction} and {@link #commitCompaction}.
   */
  public Compaction compact(String sessionId) {
    return compact(CompactRequest.newBuilder().setSessionId(sessionId).build());
  }

  /** Compact with every field of the request. */
  public Compaction compact(CompactRequest request) {
    return call(() -> stub.compact(request));
  }

  /**
   * Plans a compaction for the agent to summarise with its own LLM: send the plan's
   * history_prompt (and turn_prefix_prompt when split_turn) to the LLM, then {@link
   * #commitCompaction}. FAILED_PRECONDITION (NOTHING_TO_COMPACT) when there is nothing to cut.
   */
  public CompactionPlan prepareCompaction(String sessionId) {
    return prepareCompaction(PrepareCompactionRequest.newBuilder().setSessionId(sessionId).build());
  }

  /** PrepareCompaction with every field of the request (keep_recent_tokens, summarizer_context_window, ...). */
  public CompactionPlan prepareCompaction(PrepareCompactionRequest request) {
    return call(() -> stub.prepareCompaction(request));
  }

  /**
   * Commits {@code plan} with the LLM's summary (and turn-prefix summary for a split turn, else
   * {@code ""}). For a chunked plan the answer carries the next step in next_plan.
   */
  public Compaction commitCompaction(CompactionPlan plan, String summary, String turnPrefixSummary) {
    return commitCompaction(
        CommitCompactionRequest.newBuilder()
            .setSessionId(plan.getSessionId())
            .setPlanId(plan.getPlanId())
            .setSummary(summary)
            .setTurnPrefixSummary(turnPrefixSummary)
            .build());
  }

  /** CommitCompaction with every field of the request (proposed_memories). */
  public Compaction commitCompaction(CommitCompactionRequest request) {
    return call(() -> stub.commitCompaction(request));
  }

  /** Closes the channel (unless it was given to {@link Builder#channel}) and waits up to 5 s. */
  @Override
  public void close() {
    if (!ownsChannel) {
      return;
    }
    channel.shutdown();
    try {
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  private static <T> T call(Supplier<T> rpc) {
    try {
      return rpc.get();
    } catch (StatusRuntimeException e) {
      throw CtxwardenException.from(e);
    }
  }

  /**
   * The service config of {@link Builder#retryUnavailable}: every ContextService call that fails
   * with UNAVAILABLE is retried, up to 3 attempts with jittered exponential backoff. A retried
   * AppendMessages or CreateSession whose first attempt reached the server could apply twice: set
   * request_id (or Message.message_id) to make the retry replay the first result.
   */
  public static Map<String, ?> defaultServiceConfig() {
    Map<String, Object> retryPolicy =
        Map.of(
            "maxAttempts", 3.0,
            "initialBackoff", "0.1s",
            "maxBackoff", "2s",
            "backoffMultiplier", 2.0,
            "retryableStatusCodes", List.of("UNAVAILABLE"));
    Map<String, Object> methodConfig =
        Map.of("name", List.of(Map.of("service", SERVICE)), "retryPolicy", retryPolicy);
    return Map.of("methodConfig", List.of(methodConfig));
  }

  /** Gives unary calls without a deadline the default one. */
  private static final class DefaultDeadline implements ClientInterceptor {
    private final Duration deadline;

    DefaultDeadline(Duration deadline) {
      this.deadline = deadline;
    }

    @Override
    public <ReqT, RespT> ClientCall<ReqT, RespT> interceptCall(
        MethodDescriptor<ReqT, RespT> method, CallOptions options, Channel next) {
      if (options.getDeadline() == null && method.getType() == MethodDescriptor.MethodType.UNARY) {
        options = options.withDeadlineAfter(deadline.toNanos(), TimeUnit.NANOSECONDS);
      }
      return next.newCall(method, options);
    }
  }

  /** Sends the credentials on every call that has none of its own. */
  private static final class WithCredentials implements ClientInterceptor {
    private final BearerCredentials credentials;

    WithCredentials(BearerCredentials credentials) {
      this.credentials = credentials;
    }

    @Override
    public <ReqT, RespT> ClientCall<ReqT, RespT> interceptCall(
        MethodDescriptor<ReqT, RespT> method, CallOptions options, Channel next) {
      if (options.getCredentials() == null) {
        options = options.withCallCredentials(credentials);
      }
      return next.newCall(method, options);
    }
  }

  /**
   * Configures a {@link CtxwardenClient}. Defaults: target {@value #DEFAULT_TARGET}, TLS with the
   * JVM's trusted CAs, no API key, a {@link #DEFAULT_DEADLINE} default deadline, retry of
   * UNAVAILABLE, 64 MiB messages, keepalive pings every 5 minutes while calls are in flight.
   */
  public static final class Builder {
    private String target = DEFAULT_TARGET;
    private boolean plaintext;
    private File trustedCertificates;
    private ChannelCredentials channelCredentials;
    private String apiKey;
    private Duration defaultDeadline = DEFAULT_DEADLINE;
    private boolean retryUnavailable = true;
    private ManagedChannel channel;
    private final List<ClientInterceptor> interceptors = new ArrayList<>();

    private Builder() {}

    /**
     * The server: {@code host:port} or any gRPC target ({@code dns:///ctxwarden.internal:50051},
     * {@code unix:///run/ctxwarden.sock}).
     */
    public Builder target(String target) {
      this.target = Objects.requireNonNull(target, "target");
      return this;
    }

    /**
     * Connects without TLS, and sends the API key (if any) over that plaintext connection. An
     * explicit opt-in for a sidecar on loopback or a Unix socket; anything else should use TLS.
     */
    public Builder usePlaintext() {
      this.plaintext = true;
      return this;
    }

    /** TLS trusting the CA certificates (PEM) of {@code file} instead of the JVM's. */
    public Builder trustedCertificates(File file) {
      this.trustedCertificates = Objects.requireNonNull(file, "file");
      return this;
    }

    /** Any channel credentials (e.g. mutual TLS); replaces TLS or {@link #usePlaintext()}. */
    public Builder channelCredentials(ChannelCredentials credentials) {
      this.channelCredentials = Objects.requireNonNull(credentials, "credentials");
      return this;
    }

    /**
     * Authenticates every call with {@code authorization: Bearer <key>} (per-call credentials).
     * Sent over TLS only, unless {@link #usePlaintext()} opted in to plaintext. {@code null}
     * leaves calls unauthenticated; an empty key fails {@link #build()}.
     */
    public Builder apiKey(String key) {
      this.apiKey = key;
      return this;
    }

    /** The deadline of unary calls that have none ({@code null} or zero: none). */
    public Builder defaultDeadline(Duration deadline) {
      this.defaultDeadline = deadline;
      return this;
    }

    /** Whether to retry calls that fail with UNAVAILABLE (default true; see {@link #defaultServiceConfig()}). */
    public Builder retryUnavailable(boolean retry) {
      this.retryUnavailable = retry;
      return this;
    }

    /** More client interceptors, run before the client's own (credentials, deadline). */
    public Builder intercept(ClientInterceptor... more) {
      interceptors.addAll(Arrays.asList(more));
      return this;
    }

    /**
     * Uses a channel made elsewhere (target, TLS and retry settings are then ignored; the API key
     * and deadline still apply). {@link CtxwardenClient#close()} leaves it open.
     */
    public Builder channel(ManagedChannel channel) {
      this.channel = Objects.requireNonNull(channel, "channel");
      return this;
    }

    /** Connects (in the background: the first call waits for the connection). */
    public CtxwardenClient build() {
      BearerCredentials credentials = null;
      if (apiKey != null) {
        credentials =
            plaintext ? BearerCredentials.plaintextAllowed(apiKey) : BearerCredentials.of(apiKey);
      }
      boolean owns = channel == null;
      ManagedChannel ch = channel;
      if (ch == null) {
        ManagedChannelBuilder<?> b = Grpc.newChannelBuilder(target, transportCredentials());
        b.maxInboundMessageSize(MAX_MESSAGE_BYTES).keepAliveTime(5, TimeUnit.MINUTES);
        if (retryUnavailable) {
          b.defaultServiceConfig(defaultServiceConfig()).enableRetry();
        } else {
          b.disableRetry();
        }
        ch = b.build();
      }
      List<ClientInterceptor> chain = new ArrayList<>();
      if (defaultDeadline != null && !defaultDeadline.isZero()) {
        chain.add(new DefaultDeadline(defaultDeadline));
      }
      if (credentials != null) {
        chain.add(new WithCredentials(credentials));
      }
      // ClientInterceptors.intercept runs the last interceptor of the list first.
      List<ClientInterceptor> all = new ArrayList<>(chain);
      all.addAll(interceptors);
      Channel intercepted = ClientInterceptors.intercept(ch, all);
      return new CtxwardenClient(ch, owns, intercepted);
    }

    private ChannelCredentials transportCredentials() {
      if (channelCredentials != null) {
        return channelCredentials;
      }
      if (plaintext) {
        return InsecureChannelCredentials.create();
      }
      TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder();
      if (trustedCertificates != null) {
        try {
          tls.trustManager(trustedCertificates);
        } catch (IOException e) {
          throw new UncheckedIOException("ctxwarden: cannot read " + trustedCertificates, e);
        }
      }
      return tls.build();
    }
  }
}
