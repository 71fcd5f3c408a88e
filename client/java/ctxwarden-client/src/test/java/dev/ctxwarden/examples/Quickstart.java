package dev.ctxwarden.examples;

import ctxwarden.v1.ContextServiceOuterClass.ModelInput;
import ctxwarden.v1.ContextServiceOuterClass.RollbackTurnResponse;
import ctxwarden.v1.MessageOuterClass.Message;
import ctxwarden.v1.MessageOuterClass.ToolCall;
import ctxwarden.v1.SessionOuterClass.Session;
import ctxwarden.v1.SessionOuterClass.ToolDefinition;
import dev.ctxwarden.client.CtxwardenClient;
import dev.ctxwarden.client.CtxwardenException;
import dev.ctxwarden.client.Messages;
import java.io.File;

/**
 * Drives one ctxwarden session: the user's question, the model input, a tool call and its
 * result, a failed model call rolled back, the answer. The model is played by fixed messages;
 * the calls are real.
 *
 * <pre>
 *   CTXWARDEN_TARGET   server address (default 127.0.0.1:50051)
 *   CTXWARDEN_API_KEY  API key, when the server requires one (--api-keys-file)
 *   CTXWARDEN_TLS_CA   CA certificate (PEM) of a TLS server; without it the connection is
 *                      plaintext, for a server on loopback
 * </pre>
 */
public final class Quickstart {
  public static void main(String[] args) {
    String target = System.getenv().getOrDefault("CTXWARDEN_TARGET", CtxwardenClient.DEFAULT_TARGET);
    String ca = System.getenv("CTXWARDEN_TLS_CA");
    CtxwardenClient.Builder builder = CtxwardenClient.builder()
        .target(target)
        .apiKey(System.getenv("CTXWARDEN_API_KEY")); // null: no key
    if (ca != null) {
      builder.trustedCertificates(new File(ca)); // the key goes over TLS only
    } else {
      builder.usePlaintext(); // loopback only: the key goes in the clear
    }

    try (CtxwardenClient client = builder.build()) {
      // 1. A session with a system prompt and the tools the model may call.
      Session session = client.createSession(Session.newBuilder()
          .setSystemPrompt("You are a careful coding agent. Read files before answering.")
          .addTools(ToolDefinition.newBuilder()
              .setName("read")
              .setDescription("Read a file")
              .setParametersJson("{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}"))
          .build());
      String sid = session.getSessionId();

      // 2. The user asks; ctxwarden says what to send to the model.
      client.appendMessages(sid, Messages.user("What does setup.py do?"));
      ModelInput input = client.buildModelInput(sid);
      System.out.printf("model input: %d messages, %d tokens%n",
          input.getMessagesCount(), input.getTokens().getTotalTokens());

      // 3. The model calls a tool: the agent runs each call and records its result.
      Message answer = Messages.assistant("Let me look.",
          Messages.toolCall("call-1", "read", "{\"path\":\"setup.py\"}"));
      client.appendMessages(sid, answer);
      for (ToolCall call : Messages.toolCalls(answer)) {
        System.out.printf("tool call: %s %s%n", call.getName(), call.getArgumentsJson());
        client.appendMessages(sid, Messages.toolResult(call.getId(), "from setuptools import setup\nsetup(name=\"demo\")\n"));
      }

      // 4. The next model call fails: record it, then ask ctxwarden what to do.
      client.appendMessages(sid, Messages.failedAssistant("429 rate limit exceeded"));
      RollbackTurnResponse rollback = client.rollbackTurn(sid);
      System.out.printf("rollback: %s (%s)%n", rollback.getAction(), rollback.getReason());
      // A real agent waits rollback.getRetryAfter() and calls the model again.

      // 5. The retry succeeds.
      client.appendMessages(sid, Messages.assistant("setup.py packages the project as \"demo\"."));
      input = client.buildModelInput(sid);
      System.out.printf("session %s: %d messages in the model input%n", sid, input.getMessagesCount());
    } catch (CtxwardenException e) {
      System.err.printf("ctxwarden: %s (reason %s)%n", e.getMessage(), e.reason());
      System.exit(1);
    }
  }
}
