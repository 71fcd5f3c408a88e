package langchaingo_test

import (
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/langchaingo"
	"github.com/google/go-cmp/cmp"
)

func TestSessionKey(t *testing.T) {
	key, err := langchaingo.SessionKey("lc", "thread 1", "s:1", "é.")
	if err != nil || key != "lc:thread.201:s.3A1:.C3.A9.2E" {
		t.Fatalf("SessionKey: %q, %v", key, err)
	}
	ns, parts, err := langchaingo.SplitSessionKey(key)
	if err != nil || ns != "lc" || cmp.Diff([]string{"thread 1", "s:1", "é."}, parts) != "" {
		t.Errorf("SplitSessionKey: %q %q %v", ns, parts, err)
	}
	for _, bad := range []string{"lc:a.b", "lc:.2", "lc:.zz", "lc:.FF"} {
		if _, _, err := langchaingo.SplitSessionKey(bad); err == nil {
			t.Errorf("SplitSessionKey(%q) did not fail", bad)
		}
	}
	if _, err := langchaingo.SessionKey("a:b"); err == nil {
		t.Error("SessionKey accepted the namespace a:b")
	}
	if _, err := langchaingo.NewChatMessageHistory(nil, "x", langchaingo.WithNamespace("bad ns")); err == nil {
		t.Error("NewChatMessageHistory accepted the namespace \"bad ns\"")
	}
}
