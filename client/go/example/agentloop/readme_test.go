package agentloop_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExcerpts checks that every ```go block of client/go/README.md
// preceded by "<!-- excerpt: PATH -->" appears verbatim in PATH.
func TestReadmeExcerpts(t *testing.T) {
	root := filepath.Join("..", "..") // client/go; tests run in the package directory
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- excerpt: "
	found := 0
	rest := string(readme)
	for {
		i := strings.Index(rest, marker)
		if i < 0 {
			break
		}
		rest = rest[i+len(marker):]
		path := rest[:strings.Index(rest, " -->")]
		start := strings.Index(rest, "```go\n")
		end := strings.Index(rest[start+6:], "\n```")
		if start < 0 || end < 0 {
			t.Fatalf("excerpt of %s: no ```go block after the marker", path)
		}
		block := rest[start+6 : start+6+end]
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), block+"\n") {
			t.Errorf("README excerpt is not in %s verbatim:\n%s", path, block)
		}
		found++
	}
	if found == 0 {
		t.Fatal("README has no excerpt markers")
	}
}
