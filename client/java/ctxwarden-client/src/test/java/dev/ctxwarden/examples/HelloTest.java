package dev.ctxwarden.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.ctxwarden.client.testing.TestServer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The repository README's Java program (Hello.java) runs against a server that requires a key. */
class HelloTest {
  private static String run(ProcessBuilder pb) throws Exception {
    Process p = pb.start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(60, TimeUnit.SECONDS));
    return p.exitValue() + "\n" + out;
  }

  @Test
  void helloRunsWithAnApiKeyAndReportsTheReasonWithout() throws Exception {
    String key = "ck_hello_0123456789";
    try (TestServer server = TestServer.start(
        "--api-keys-file", TestServer.apiKeysFile("acme", key).toString())) {
      Path java = Paths.get(System.getProperty("java.home"), "bin", "java");
      ProcessBuilder pb = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"),
          Hello.class.getName()).redirectErrorStream(true);
      pb.environment().put("CTXWARDEN_TARGET", server.target());
      pb.environment().put("CTXWARDEN_API_KEY", key);
      String ok = run(pb);
      assertTrue(ok.matches("(?s)0\nsession \\S+: 1 message\\(s\\), \\d+ tokens\n"), ok);

      pb.environment().remove("CTXWARDEN_API_KEY");
      String refused = run(pb);
      assertEquals('1', refused.charAt(0), refused);
      assertTrue(refused.contains("reason MISSING_CREDENTIALS"), refused);
    }
  }
}
