package agentloop_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmePrograms checks that every ```go block of client/go/README.md is
// a complete program of this module: preceded by "<!-- program: PATH -->"
// and equal to the whole file PATH (which test.sh builds, vets and tests).
func TestReadmePrograms(t *testing.T) {
	root := filepath.Join("..", "..") // client/go; tests run in the package directory
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)(?:<!-- program: ([^ ]+) -->\n)?```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README has no ```go block")
	}
	for _, b := range blocks {
		path, block := b[1], b[2]
		if path == "" {
			t.Errorf("a ```go block without a <!-- program: PATH --> line before it:\n%.200s", block)
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Error(err)
			continue
		}
		if block != string(src) {
			t.Errorf("the README's program %s is not the file verbatim", path)
		}
		if !strings.HasPrefix(block, "// ") || !strings.Contains(block, "\npackage main\n") {
			t.Errorf("the README's program %s is not a documented package main", path)
		}
	}
}
