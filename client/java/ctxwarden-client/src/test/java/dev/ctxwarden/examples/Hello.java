package dev.ctxwarden.examples;

import ctxwarden.v1.ContextServiceOuterClass.ModelInput;
import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.CtxwardenException;
import dev.ctxwarden.client.Messages;

/**
 * The repository README's Java program: connect with an API key, create a session, append the
 * user's message, build the model input. CTXWARDEN_TARGET (default 127.0.0.1:50051) and
 * CTXWARDEN_API_KEY (when the server requires one) configure it.
 */
public final class Hello {
  public static void main(String[] args) {
    CtxwardenClient.Builder builder = CtxwardenClient.builder()
        .target(System.getenv().getOrDefault("CTXWARDEN_TARGET", CtxwardenClient.DEFAULT_TARGET))
        .apiKey(System.getenv("CTXWARDEN_API_KEY")) // null: no key
        .usePlaintext(); // a sidecar on loopback; TLS is the default
    try (CtxwardenClient client = builder.build()) {
      Session session = client.createSession(
          Session.newBuilder().setSystemPrompt("You are a terse assistant.").build());
      String sid = session.getSessionId();
      client.appendMessages(sid, Messages.user("What is ctxwarden?"));
      ModelInput input = client.buildModelInput(sid);
      System.out.printf("session %s: %d message(s), %d tokens%n",
          sid, input.getMessagesCount(), input.getTokens().getTotalTokens());
    } catch (CtxwardenException e) {
      System.err.printf("ctxwarden: %s (reason %s)%n", e.getMessage(), e.reason());
      System.exit(1);
    }
  }
}
