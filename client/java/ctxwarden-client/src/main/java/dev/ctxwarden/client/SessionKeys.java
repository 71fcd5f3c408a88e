package dev.ctxwarden.client;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * A reversible mapping of framework identifiers (conversation IDs, memory IDs) into one ctxwarden
 * session ID, the same as the Python client's {@code session_ids}: {@code namespace:part1:part2}
 * where inside a part every UTF-8 byte outside {@code [A-Za-z0-9_-]} ({@code .} and {@code :}
 * included) is written {@code .XX} (two upper-case hex digits). Nothing is hashed: two different
 * tuples never share a key; a key longer than 255 characters is refused by the server.
 *
 * <pre>{@code
 * SessionKeys.sessionKey("spring-ai", "user@example.com")  // "spring-ai:user.40example.2Ecom"
 * SessionKeys.split("spring-ai:user.40example.2Ecom")      // ["spring-ai", "user@example.com"]
 * }</pre>
 */
public final class SessionKeys {
  private static final Pattern NAMESPACE = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_-]*");
  private static final Pattern ESCAPED = Pattern.compile("(?:[A-Za-z0-9_-]|\\.[0-9A-F]{2})*");

  private SessionKeys() {}

  /** {@code part} with every byte outside {@code [A-Za-z0-9_-]} written as {@code .XX}. */
  public static String escape(String part) {
    StringBuilder sb = new StringBuilder();
    for (byte b : part.getBytes(StandardCharsets.UTF_8)) {
      int c = b & 0xff;
      if (c < 0x80 && (Character.isLetterOrDigit(c) || c == '_' || c == '-')) {
        sb.append((char) c);
      } else {
        sb.append('.').append(String.format("%02X", c));
      }
    }
    return sb.toString();
  }

  /** The inverse of {@link #escape}; IllegalArgumentException for text it cannot have made. */
  public static String unescape(String escaped) {
    if (!ESCAPED.matcher(escaped).matches()) {
      throw new IllegalArgumentException("not an escaped part: " + escaped);
    }
    ByteArrayOutputStream raw = new ByteArrayOutputStream();
    for (int i = 0; i < escaped.length(); ) {
      char c = escaped.charAt(i);
      if (c == '.') {
        raw.write(Integer.parseInt(escaped.substring(i + 1, i + 3), 16));
        i += 3;
      } else {
        raw.write(c);
        i++;
      }
    }
    return raw.toString(StandardCharsets.UTF_8);
  }

  /** {@code namespace:part1:part2...} with each part escaped (the namespace is not). */
  public static String sessionKey(String namespace, String... parts) {
    if (!NAMESPACE.matcher(namespace).matches()) {
      throw new IllegalArgumentException(
          "a namespace is [A-Za-z0-9][A-Za-z0-9_-]*, got " + namespace);
    }
    StringBuilder sb = new StringBuilder(namespace);
    for (String part : parts) {
      sb.append(':').append(escape(part));
    }
    return sb.toString();
  }

  /** {@code [namespace, part1, part2, ...]} of a {@link #sessionKey}. */
  public static List<String> split(String key) {
    String[] pieces = key.split(":", -1);
    List<String> out = new ArrayList<>();
    out.add(pieces[0]);
    for (int i = 1; i < pieces.length; i++) {
      out.add(unescape(pieces[i]));
    }
    return out;
  }
}
