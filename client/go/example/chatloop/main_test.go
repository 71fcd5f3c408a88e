package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/internal/fakeopenai"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
)

// TestChatLoop runs the README's program against a real server that requires
// an API key and the scripted Chat Completions endpoint: read, grep, answer.
func TestChatLoop(t *testing.T) {
	const key = "ck_chatloop_test"
	sum := sha256.Sum256([]byte(key))
	keys := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(keys, []byte("demo:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, "--api-keys-file", keys)
	provider := &fakeopenai.Provider{APIKey: "sk-test"}
	api := httptest.NewServer(provider)
	defer api.Close()

	project := t.TempDir()
	files := map[string]string{
		"setup.py":  "from setuptools import setup\n\nsetup(name=\"demo\", python_requires=\">=3.9\")\n",
		"README.md": "# demo\n\nRequires Python 3.9 or later.\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(project, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(project)
	t.Setenv("CTXWARDEN_TARGET", srv.Target)
	t.Setenv("CTXWARDEN_API_KEY", key)
	t.Setenv("OPENAI_BASE_URL", api.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("OPENAI_MODEL", "")

	var out bytes.Buffer
	if err := run(context.Background(), "What does setup.py do?", &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := []string{
		"model call 1: stop_reason=STOP_REASON_TOOL_USE output_tokens=18",
		`tool read {"path":"setup.py"}: ` + strconv.Itoa(len(files["setup.py"])) + " bytes",
		"model call 2: stop_reason=STOP_REASON_TOOL_USE output_tokens=41",
		`tool grep {"pattern":"requires","path":"."}: ` + // setup.py:3:setup(... python_requires ...)
			strconv.Itoa(len("setup.py:3:"+strings.Split(files["setup.py"], "\n")[2])) + " bytes",
		"model call 3: stop_reason=STOP_REASON_STOP output_tokens=47",
		"answer: " + fakeopenai.Answer,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(provider.Requests()); n != 3 {
		t.Errorf("the provider got %d requests, want 3", n)
	}

	// Without the key the server refuses the program.
	t.Setenv("CTXWARDEN_API_KEY", "")
	if err := run(context.Background(), "hi", &out); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("run without the API key: %v, want Unauthenticated", err)
	}
}
