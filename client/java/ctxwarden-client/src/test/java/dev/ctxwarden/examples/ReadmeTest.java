package dev.ctxwarden.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.ctxwarden.client.testing.TestServer;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** The README's program is this module's Quickstart.java, verbatim, and runs against a real server. */
class ReadmeTest {
  private static final Path JAVA_DIR = TestServer.repoRoot().resolve("client/java");
  private static final Pattern PROGRAM =
      Pattern.compile("<!-- program: (\\S+) -->\\n```java\\n(.*?)```", Pattern.DOTALL);

  @Test
  void readmeProgramsAreTheFilesVerbatim() throws IOException {
    String readme = Files.readString(JAVA_DIR.resolve("README.md"));
    Matcher m = PROGRAM.matcher(readme);
    int found = 0;
    while (m.find()) {
      found++;
      String file = Files.readString(JAVA_DIR.resolve(m.group(1)));
      assertEquals(file, m.group(2), "README block differs from " + m.group(1));
    }
    assertTrue(found >= 1, "no <!-- program: ... --> block in README.md");
  }

  @Test
  void quickstartRunsWithAnApiKey() throws Exception {
    String key = "ck_readme_0123456789";
    try (TestServer server = TestServer.start(
        "--api-keys-file", TestServer.apiKeysFile("acme", key).toString())) {
      Path java = Paths.get(System.getProperty("java.home"), "bin", "java");
      ProcessBuilder pb = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"),
          Quickstart.class.getName()).redirectErrorStream(true);
      Map<String, String> env = pb.environment();
      env.put("CTXWARDEN_TARGET", server.target());
      env.put("CTXWARDEN_API_KEY", key);
      env.remove("CTXWARDEN_TLS_CA");
      Process p = pb.start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(p.waitFor(60, TimeUnit.SECONDS));
      assertEquals(0, p.exitValue(), out);
      assertTrue(out.contains("model input: 1 messages"), out);
      assertTrue(out.contains("tool call: read {\"path\":\"setup.py\"}"), out);
      assertTrue(out.contains("rollback: RECOVERY_ACTION_RETRY"), out);
      assertTrue(out.matches("(?s).*session \\S+: 4 messages in the model input.*"), out);

      // Without the key the program reports the server's reason.
      env.remove("CTXWARDEN_API_KEY");
      Process refused = pb.start();
      String err = new String(refused.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(refused.waitFor(60, TimeUnit.SECONDS));
      assertEquals(1, refused.exitValue(), err);
      assertTrue(err.contains("reason MISSING_CREDENTIALS"), err);
    }
  }
}
