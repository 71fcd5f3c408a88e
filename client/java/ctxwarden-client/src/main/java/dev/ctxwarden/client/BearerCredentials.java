package dev.ctxwarden.client;

import io.grpc.CallCredentials;
import io.grpc.Metadata;
import io.grpc.SecurityLevel;
import io.grpc.Status;
import java.util.Objects;
import java.util.concurrent.Executor;

/**
 * Per-call credentials that send {@code authorization: Bearer <key>}: an API key of the server's
 * {@code --api-keys-file}, or a JWT. Made by {@link CtxwardenClient.Builder#apiKey}; use them
 * directly with the generated stubs ({@code stub.withCallCredentials(BearerCredentials.of(key))}).
 *
 * <p>{@link #of} sends the key over TLS only: on a plaintext connection the call fails with
 * UNAUTHENTICATED before anything is sent. {@link #plaintextAllowed} also sends it over
 * plaintext, for a sidecar on loopback.
 */
public final class BearerCredentials extends CallCredentials {
  static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final String header;
  private final boolean requireTls;

  private BearerCredentials(String key, boolean requireTls) {
    Objects.requireNonNull(key, "key");
    if (key.isBlank()) {
      throw new IllegalArgumentException("ctxwarden: empty API key");
    }
    this.header = "Bearer " + key;
    this.requireTls = requireTls;
  }

  /** Credentials that send {@code key} over TLS only. */
  public static BearerCredentials of(String key) {
    return new BearerCredentials(key, true);
  }

  /**
   * Credentials that send {@code key} over any connection, plaintext included: readable by anyone
   * on the path. Only for a server on loopback (or a Unix socket).
   */
  public static BearerCredentials plaintextAllowed(String key) {
    return new BearerCredentials(key, false);
  }

  /** Whether these credentials refuse a connection without TLS. */
  public boolean requiresTls() {
    return requireTls;
  }

  @Override
  public void applyRequestMetadata(
      RequestInfo requestInfo, Executor appExecutor, MetadataApplier applier) {
    if (requireTls && requestInfo.getSecurityLevel() != SecurityLevel.PRIVACY_AND_INTEGRITY) {
      applier.fail(
          Status.UNAUTHENTICATED.withDescription(
              "ctxwarden: the API key is sent over TLS only; this connection is plaintext "
                  + "(use TLS, or CtxwardenClient.Builder.usePlaintext() for a server on loopback)"));
      return;
    }
    Metadata headers = new Metadata();
    headers.put(AUTHORIZATION, header);
    applier.apply(headers);
  }

  @Override
  public String toString() {
    return "BearerCredentials{requireTls=" + requireTls + "}"; // never the key
  }
}
