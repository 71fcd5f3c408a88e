package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/langchaingo/internal/cwserver"
)

// TestExample runs the README's program against a real server, with the
// stand-in model.
func TestExample(t *testing.T) {
	srv, err := cwserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	t.Setenv("CTXWARDEN_TARGET", srv.Target)
	t.Setenv("OPENAI_API_KEY", "")
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), srv.Logs())
	}
	want := `user: What does item 7 cost?
clerk: Item 7 costs 17 euros.
user: And item 12?
clerk: Item 12 costs 22 euros.
ctxwarden session lc:demo-N holds 4 messages:
  human: What does item 7 cost?
  ai: Item 7 costs 17 euros.
  human: And item 12?
  ai: Item 12 costs 22 euros.
`
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestReadme checks that the ```go block of README.md is this program, verbatim.
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- program: ([^ ]+) -->\n```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) != 1 || blocks[0][1] != "example/main.go" {
		t.Fatalf("README.md has %d program blocks, want one of example/main.go", len(blocks))
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if blocks[0][2] != string(src) {
		t.Error("the README's program is not example/main.go verbatim")
	}
	if n := strings.Count(string(readme), "```go"); n != 1 {
		t.Errorf("README.md has %d ```go blocks, want 1", n)
	}
}
