package dev.ctxwarden.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusException;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A failed ctxwarden call: the gRPC status plus the {@code google.rpc.Status} details the server
 * attaches (trailer {@code grpc-status-details-bin}).
 *
 * <p>{@link #reason()} is the stable machine-readable code of the failure, the reason of the
 * {@code google.rpc.ErrorInfo} with domain {@value #ERROR_DOMAIN} (e.g. {@code SESSION_NOT_FOUND},
 * {@code LAST_SEQ_MISMATCH}, {@code INVALID_CREDENTIALS}); {@link #metadata()} its metadata (e.g.
 * {@code field}); {@link #retryDelay()} the {@code google.rpc.RetryInfo} delay the server asks for
 * (rate limits, a busy session). A failure the server did not answer (a client-side deadline, a
 * connection refused) has the status but no reason.
 *
 * <pre>{@code
 * try {
 *     client.getSession("nope");
 * } catch (CtxwardenException e) {
 *     if (e.code() == Status.Code.NOT_FOUND) { ... }
 *     System.err.println(e.reason()); // SESSION_NOT_FOUND
 * }
 * }</pre>
 */
public class CtxwardenException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The {@code ErrorInfo.domain} of errors raised by the ctxwarden server. */
  public static final String ERROR_DOMAIN = "ctxwarden.dev";

  private final transient Status status;
  private final transient Metadata trailers;
  private final transient com.google.rpc.Status statusProto;
  private final transient ErrorInfo errorInfo;
  private final transient RetryInfo retryInfo;
  private final transient BadRequest badRequest;

  /** Wraps a status and its trailers (which may be null). */
  public CtxwardenException(Status status, Metadata trailers) {
    super(message(status), status.getCause());
    this.status = status;
    this.trailers = trailers;
    this.statusProto = StatusProto.fromStatusAndTrailers(status, trailers);
    ErrorInfo info = null;
    RetryInfo retry = null;
    BadRequest bad = null;
    for (Any detail : statusProto.getDetailsList()) {
      try {
        if (info == null && detail.is(ErrorInfo.class)) {
          info = detail.unpack(ErrorInfo.class);
        } else if (retry == null && detail.is(RetryInfo.class)) {
          retry = detail.unpack(RetryInfo.class);
        } else if (bad == null && detail.is(BadRequest.class)) {
          bad = detail.unpack(BadRequest.class);
        }
      } catch (InvalidProtocolBufferException ignored) {
        // A malformed detail is left out; the status itself stands.
      }
    }
    this.errorInfo = info;
    this.retryInfo = retry;
    this.badRequest = bad;
  }

  /**
   * The ctxwarden exception for any failure of a gRPC call: a {@link StatusRuntimeException} or
   * {@link StatusException} (with its trailers), a {@code CtxwardenException} as it is, anything
   * else as {@code UNKNOWN} with it as the cause. For code that calls the generated stubs itself.
   */
  public static CtxwardenException from(Throwable t) {
    if (t instanceof CtxwardenException e) {
      return e;
    }
    if (t instanceof StatusRuntimeException e) {
      return new CtxwardenException(e.getStatus(), e.getTrailers());
    }
    if (t instanceof StatusException e) {
      return new CtxwardenException(e.getStatus(), e.getTrailers());
    }
    return new CtxwardenException(Status.fromThrowable(t), Status.trailersFromThrowable(t));
  }

  /**
   * The ErrorInfo reason of any gRPC failure ({@code ""} when it carries none, e.g. a client-side
   * DEADLINE_EXCEEDED). The Java twin of the Go client's {@code ErrorReason}.
   */
  public static String reasonOf(Throwable t) {
    return from(t).reason();
  }

  private static String message(Status status) {
    String description = status.getDescription();
    return description == null || description.isEmpty()
        ? status.getCode().name()
        : status.getCode().name() + ": " + description;
  }

  /** The gRPC status code, e.g. {@code NOT_FOUND}. */
  public Status.Code code() {
    return status.getCode();
  }

  /** The gRPC status (code, description, cause). */
  public Status status() {
    return status;
  }

  /** The status description the server sent (human-readable), or {@code ""}. */
  public String description() {
    return status.getDescription() == null ? "" : status.getDescription();
  }

  /** The response trailers, or null when the call failed before the server answered. */
  public Metadata trailers() {
    return trailers;
  }

  /** The whole {@code google.rpc.Status}: code, message and every detail. */
  public com.google.rpc.Status statusProto() {
    return statusProto;
  }

  /** The {@code google.rpc.ErrorInfo} detail, if the server sent one. */
  public Optional<ErrorInfo> errorInfo() {
    return Optional.ofNullable(errorInfo);
  }

  /**
   * The stable machine-readable reason, e.g. {@code SESSION_NOT_FOUND}; {@code ""} when there is
   * no ErrorInfo.
   */
  public String reason() {
    return errorInfo == null ? "" : errorInfo.getReason();
  }

  /** The ErrorInfo domain ({@value #ERROR_DOMAIN} for the server's errors), or {@code ""}. */
  public String domain() {
    return errorInfo == null ? "" : errorInfo.getDomain();
  }

  /** The ErrorInfo metadata (e.g. {@code field}, {@code limit_bytes}); empty without one. */
  public Map<String, String> metadata() {
    return errorInfo == null ? Map.of() : errorInfo.getMetadataMap();
  }

  /** The delay the server's {@code google.rpc.RetryInfo} asks for before a retry, if any. */
  public Optional<Duration> retryDelay() {
    if (retryInfo == null || !retryInfo.hasRetryDelay()) {
      return Optional.empty();
    }
    com.google.protobuf.Duration d = retryInfo.getRetryDelay();
    return Optional.of(Duration.ofSeconds(d.getSeconds(), d.getNanos()));
  }

  /** The {@code google.rpc.BadRequest} field violations, if the server sent them. */
  public List<BadRequest.FieldViolation> fieldViolations() {
    return badRequest == null ? List.of() : badRequest.getFieldViolationsList();
  }

  @Override
  public String toString() {
    String reason = reason();
    return reason.isEmpty() ? super.toString() : super.toString() + " [reason " + reason + "]";
  }
}
