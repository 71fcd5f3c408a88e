// Package testserver starts a real ctxwarden server process for tests.
package testserver

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

const readyPrefix = "ctxwarden listening on "

// Server is a running ctxwarden server.
type Server struct {
	// Target is the "127.0.0.1:PORT" the server listens on.
	Target string
	// LogPath is the file holding the server's stderr.
	LogPath string
}

// Binary returns the ctxwarden executable: $CTXWARDEN_BIN, else
// <repo>/.venv/bin/ctxwarden, the repo root being found from this file's
// location (symlinks resolved).
func Binary() (string, error) {
	if bin := os.Getenv("CTXWARDEN_BIN"); bin != "" {
		return bin, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate testserver.go; set CTXWARDEN_BIN")
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(file))
	if err != nil {
		return "", err
	}
	// dir is <repo>/client/go/internal/testserver.
	return filepath.Join(dir, "..", "..", "..", "..", ".venv", "bin", "ctxwarden"), nil
}

// Start runs `ctxwarden serve` on a free loopback port with a new SQLite
// database in a temporary directory, waits for its "listening" line and stops
// it (SIGTERM, then SIGKILL after 10 s) when the test ends. extraArgs go to
// `ctxwarden serve` after those (e.g. "--api-keys-file", path).
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("ctxwarden server binary not found (%v); create the venv "+
			"(python3 -m venv .venv && .venv/bin/pip install -e .) or set CTXWARDEN_BIN", err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve",
		"--listen", "127.0.0.1:0",
		"--database-url", "sqlite:///" + filepath.Join(dir, "ctxwarden.db")}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	// Our own pipe (not StdoutPipe), so cmd.Wait never closes it under the reader.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("server stderr:\n%s", b)
			}
		}
	})

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, readyPrefix) {
				ready <- strings.TrimSpace(strings.TrimPrefix(line, readyPrefix))
				break
			}
		}
		// Keep draining so the server never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stdout)
		stdout.Close()
	}()

	select {
	case target := <-ready:
		return &Server{Target: target, LogPath: logPath}
	case err := <-exited:
		exited <- err // let Cleanup see the exit too
		b, _ := os.ReadFile(logPath)
		t.Fatalf("ctxwarden serve exited before listening: %v\n%s", err, b)
	case <-time.After(60 * time.Second):
		t.Fatalf("ctxwarden serve did not print %q within 60s", readyPrefix)
	}
	return nil
}
