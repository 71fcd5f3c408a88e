package dev.ctxwarden.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ctxwarden.v1.ContextServiceOuterClass.GetSessionRequest;
import ctxwarden.v1.SessionOuterClass.Session;
import dev.ctxwarden.client.testing.TestServer;
import io.grpc.InsecureChannelCredentials;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** API keys (plaintext on loopback and TLS), and RetryInfo of a rate-limited call. */
class AuthTest {
  private static final String KEY = "ck_test_0123456789abcdef";

  /** CreateSession, AppendMessages and BuildModelInput: the calls an agent makes. */
  private static void useSession(CtxwardenClient c) {
    String sid = c.createSession(Session.getDefaultInstance()).getSessionId();
    c.appendMessages(sid, Messages.user("hi"));
    c.buildModelInput(sid);
  }

  private static void assertUnauthenticated(String reason, CtxwardenClient c) {
    CtxwardenException e = assertThrows(CtxwardenException.class, () -> useSession(c));
    assertEquals(Status.Code.UNAUTHENTICATED, e.code(), e.toString());
    assertEquals(reason, e.reason());
  }

  @Test
  void apiKeyOnLoopback() throws Exception {
    try (TestServer server = TestServer.start("--api-keys-file", TestServer.apiKeysFile("acme", KEY).toString());
        CtxwardenClient noKey = server.client(null);
        CtxwardenClient wrongKey = server.client("ck_wrong");
        CtxwardenClient good = server.client(KEY);
        // The key without the plaintext opt-in: refused on this plaintext channel, never sent.
        CtxwardenClient tlsOnly = CtxwardenClient.builder().target(server.target())
            .channelCredentials(InsecureChannelCredentials.create()).apiKey(KEY).build()) {
      assertUnauthenticated("MISSING_CREDENTIALS", noKey);
      assertUnauthenticated("INVALID_CREDENTIALS", wrongKey);
      useSession(good);

      CtxwardenException refused = assertThrows(CtxwardenException.class, () -> useSession(tlsOnly));
      assertEquals(Status.Code.UNAUTHENTICATED, refused.code());
      assertEquals("", refused.reason()); // the server never saw the call
      assertTrue(refused.description().contains("TLS only"), refused.description());

      // Raw stubs with BearerCredentials: the same rule per call.
      StatusRuntimeException raw = assertThrows(StatusRuntimeException.class, () -> noKey.stub()
          .withCallCredentials(BearerCredentials.of(KEY))
          .getSession(GetSessionRequest.newBuilder().setSessionId("s").build()));
      assertEquals(Status.Code.UNAUTHENTICATED, raw.getStatus().getCode());
      StatusRuntimeException notFound = assertThrows(StatusRuntimeException.class, () -> noKey.stub()
          .withCallCredentials(BearerCredentials.plaintextAllowed(KEY))
          .getSession(GetSessionRequest.newBuilder().setSessionId("s").build()));
      assertEquals("SESSION_NOT_FOUND", CtxwardenException.reasonOf(notFound));

      assertThrows(IllegalArgumentException.class, () -> server.client(""));
    }
  }

  @Test
  void apiKeyOverTls() throws Exception {
    Path dir = Files.createTempDirectory("ctxwarden-tls-");
    Path cert = dir.resolve("cert.pem");
    Path key = dir.resolve("key.pem");
    Process p = new ProcessBuilder("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key.toString(), "-out", cert.toString())
        .redirectErrorStream(true).start();
    assertTrue(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0,
        "openssl req failed: " + new String(p.getInputStream().readAllBytes()));
    try (TestServer server = TestServer.start("--api-keys-file", TestServer.apiKeysFile("acme", KEY).toString(),
            "--tls-cert", cert.toString(), "--tls-key", key.toString());
        CtxwardenClient good = CtxwardenClient.builder().target(server.target())
            .trustedCertificates(cert.toFile()).apiKey(KEY).build();
        CtxwardenClient noKey = CtxwardenClient.builder().target(server.target())
            .trustedCertificates(cert.toFile()).build()) {
      useSession(good);
      assertUnauthenticated("MISSING_CREDENTIALS", noKey);
    }
  }

  @Test
  void retryInfoOfARateLimitedCall() throws Exception {
    try (TestServer server = TestServer.start("--rate-limit-rps", "1");
        CtxwardenClient c = CtxwardenClient.builder().target(server.target()).usePlaintext()
            .retryUnavailable(false).build()) {
      CtxwardenException limited = null;
      for (int i = 0; i < 20 && limited == null; i++) {
        try {
          c.getSession("s" + i);
        } catch (CtxwardenException e) {
          if (e.code() == Status.Code.RESOURCE_EXHAUSTED) {
            limited = e;
          }
        }
      }
      assertTrue(limited != null, "no call was rate limited");
      assertEquals("RATE_LIMITED", limited.reason());
      Optional<Duration> delay = limited.retryDelay();
      assertTrue(delay.isPresent() && !delay.get().isNegative() && !delay.get().isZero(), delay.toString());
    }
  }
}
