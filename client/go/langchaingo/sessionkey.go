package langchaingo

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

var namespacePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// SessionKey joins namespace and parts into one ctxwarden session ID,
// "namespace:part1:part2...", reversibly: inside a part every UTF-8 byte
// outside [A-Za-z0-9_-] ("." and ":" included) is written ".XX" (two
// upper-case hex digits), so SplitSessionKey gives the parts back exactly.
// Nothing is hashed: two different tuples never share a key, and a key longer
// than the server's limit (255 characters) is refused by the server. It is the
// scheme of the Python adapters (ctxwarden_client.integrations.session_ids),
// so both name the same chat history by the same ID.
func SessionKey(namespace string, parts ...string) (string, error) {
	if !namespacePattern.MatchString(namespace) {
		return "", fmt.Errorf("ctxwarden langchaingo: a namespace is [A-Za-z0-9][A-Za-z0-9_-]*, got %q", namespace)
	}
	var b strings.Builder
	b.WriteString(namespace)
	for _, p := range parts {
		b.WriteByte(':')
		for i := 0; i < len(p); i++ {
			c := p[i]
			if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, ".%02X", c)
			}
		}
	}
	return b.String(), nil
}

// SplitSessionKey returns the namespace and the parts of a SessionKey.
func SplitSessionKey(key string) (namespace string, parts []string, err error) {
	fields := strings.Split(key, ":")
	for _, f := range fields[1:] {
		part, err := unescapePart(f)
		if err != nil {
			return "", nil, err
		}
		parts = append(parts, part)
	}
	return fields[0], parts, nil
}

func unescapePart(escaped string) (string, error) {
	var raw []byte
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c != '.' {
			raw = append(raw, c)
			continue
		}
		if i+2 >= len(escaped) || !isUpperHex(escaped[i+1]) || !isUpperHex(escaped[i+2]) {
			return "", fmt.Errorf("ctxwarden langchaingo: not an escaped part: %q", escaped)
		}
		raw = append(raw, hexValue(escaped[i+1])<<4|hexValue(escaped[i+2]))
		i += 2
	}
	if !utf8.Valid(raw) {
		return "", fmt.Errorf("ctxwarden langchaingo: not an escaped part (not UTF-8): %q", escaped)
	}
	return string(raw), nil
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func hexValue(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
