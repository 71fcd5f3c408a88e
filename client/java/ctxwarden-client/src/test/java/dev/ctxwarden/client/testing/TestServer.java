package dev.ctxwarden.client.testing;

import dev.ctxwarden.client.CtxwardenClient;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/**
 * A real {@code ctxwarden serve} for the tests: {@code $CTXWARDEN_BIN}, else the repository's
 * {@code .venv/bin/ctxwarden}, on a new SQLite database in a temporary directory, listening on a
 * free loopback port. {@link #restart()} stops it and starts it again on the same database.
 */
public final class TestServer implements AutoCloseable {
  private static final String READY = "ctxwarden listening on ";

  private final Path dir;
  private final List<String> extraArgs;
  private Process process;
  private String target;

  private TestServer(Path dir, List<String> extraArgs) {
    this.dir = dir;
    this.extraArgs = extraArgs;
  }

  /** Starts a server; {@code extraArgs} go to {@code ctxwarden serve} (e.g. --api-keys-file). */
  public static TestServer start(String... extraArgs) throws IOException {
    TestServer s = new TestServer(Files.createTempDirectory("ctxwarden-java-"), List.of(extraArgs));
    s.launch();
    return s;
  }

  /** The repository root: the first directory up from the working directory with protos/ctxwarden/v1. */
  public static Path repoRoot() {
    Path p = Paths.get("").toAbsolutePath();
    for (; p != null; p = p.getParent()) {
      if (Files.isDirectory(p.resolve("protos/ctxwarden/v1"))) {
        return p;
      }
    }
    throw new IllegalStateException("cannot find the repository root (protos/ctxwarden/v1) above "
        + Paths.get("").toAbsolutePath());
  }

  /** The server executable: $CTXWARDEN_BIN, else REPO/.venv/bin/ctxwarden. */
  public static Path binary() {
    String bin = System.getenv("CTXWARDEN_BIN");
    return bin != null && !bin.isEmpty() ? Paths.get(bin) : repoRoot().resolve(".venv/bin/ctxwarden");
  }

  /** A temporary --api-keys-file mapping {@code key} to {@code tenant} (sha256 of the key). */
  public static Path apiKeysFile(String tenant, String key) throws IOException {
    Path file = Files.createTempFile("ctxwarden-api-keys-", "");
    file.toFile().deleteOnExit();
    Files.writeString(file, "# tenant:sha256(key)\n" + tenant + ":" + sha256Hex(key) + "\n");
    return file;
  }

  static String sha256Hex(String s) {
    try {
      return HexFormat.of().formatHex(
          MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private void launch() throws IOException {
    Path bin = binary();
    if (!Files.isExecutable(bin)) {
      throw new IllegalStateException("ctxwarden server binary not found at " + bin
          + "; create the venv (python3 -m venv .venv && .venv/bin/pip install -e .) or set CTXWARDEN_BIN");
    }
    List<String> cmd = new ArrayList<>(List.of(bin.toString(), "serve",
        "--listen", "127.0.0.1:0",
        "--database-url", "sqlite:///" + dir.resolve("ctxwarden.db")));
    cmd.addAll(extraArgs);
    ProcessBuilder pb = new ProcessBuilder(cmd)
        .redirectError(ProcessBuilder.Redirect.appendTo(dir.resolve("server.log").toFile()));
    process = pb.start();
    CompletableFuture<String> ready = new CompletableFuture<>();
    InputStream stdout = process.getInputStream();
    Thread reader = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(new InputStreamReader(stdout, StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) { // keeps draining so the server never blocks
          if (!ready.isDone() && line.trim().startsWith(READY)) {
            ready.complete(line.trim().substring(READY.length()).trim());
          }
        }
      } catch (IOException ignored) {
        // the server went away
      }
      ready.completeExceptionally(new IOException("ctxwarden serve exited before listening"));
    }, "ctxwarden-test-server-stdout");
    reader.setDaemon(true);
    reader.start();
    try {
      target = ready.get(60, TimeUnit.SECONDS);
    } catch (Exception e) {
      process.destroyForcibly();
      String why = e instanceof TimeoutException ? "did not print '" + READY + "' within 60 s" : e.toString();
      throw new IOException("ctxwarden serve " + why + "; stderr:\n" + log(), e);
    }
  }

  /** {@code 127.0.0.1:PORT}. */
  public String target() {
    return target;
  }

  /** A plaintext client of this server ({@code apiKey} may be null). */
  public CtxwardenClient client(String apiKey) {
    return CtxwardenClient.builder().target(target).usePlaintext().apiKey(apiKey).build();
  }

  /** What the server wrote to stderr. */
  public String log() {
    try {
      Path log = dir.resolve("server.log");
      return Files.exists(log) ? Files.readString(log) : "";
    } catch (IOException e) {
      return e.toString();
    }
  }

  /** Stops the server (SIGTERM, then SIGKILL after 10 s), keeping its database. */
  public void stop() {
    if (process == null) {
      return;
    }
    process.destroy();
    try {
      if (!process.waitFor(10, TimeUnit.SECONDS)) {
        process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    process = null;
  }

  /** Stops the server and starts it again on the same database (a new port: see {@link #target()}). */
  public void restart() throws IOException {
    stop();
    launch();
  }

  /** Stops the server and removes its directory. */
  @Override
  public void close() throws IOException {
    stop();
    try (Stream<Path> files = Files.walk(dir)) {
      files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }
}
