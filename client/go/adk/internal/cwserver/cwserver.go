// Package cwserver runs a real ctxwarden server for the adapter's tests, one
// that can be restarted on the same port and SQLite database.
package cwserver

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
)

const readyPrefix = "ctxwarden listening on "

// Server is a ctxwarden server process with its own temporary directory.
type Server struct {
	// Target is "127.0.0.1:PORT"; it stays the same across restarts.
	Target string

	dir    string
	args   []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	log    *os.File
	starts int
}

// Start runs `ctxwarden serve` on a free loopback port with a new SQLite
// database in a new temporary directory; extraArgs go after those.
func Start(extraArgs ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "ctxwarden-adapter-test-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, args: extraArgs}
	if err := s.start("127.0.0.1:0"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(listen string) error {
	bin, err := testserver.Binary()
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("ctxwarden server binary not found (%v); create the venv "+
			"(python3 -m venv .venv && .venv/bin/pip install -e .) or set CTXWARDEN_BIN", err)
	}
	s.starts++
	logFile, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("server-%d.log", s.starts)))
	if err != nil {
		return err
	}
	args := append([]string{"serve", "--listen", listen,
		"--database-url", "sqlite:///" + filepath.Join(s.dir, "ctxwarden.db")}, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	stdout, w, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return err
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		logFile.Close()
		w.Close()
		stdout.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, readyPrefix) {
				ready <- strings.TrimSpace(strings.TrimPrefix(line, readyPrefix))
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout) // never let the server block on a full pipe
		stdout.Close()
	}()
	s.cmd, s.exited, s.log = cmd, exited, logFile
	select {
	case target := <-ready:
		s.Target = target
		return nil
	case err := <-exited:
		exited <- err
		logFile.Close()
		b, _ := os.ReadFile(logFile.Name())
		return fmt.Errorf("ctxwarden serve exited before listening: %v\n%s", err, b)
	case <-time.After(90 * time.Second):
		s.stop()
		return fmt.Errorf("ctxwarden serve did not print %q within 90s", readyPrefix)
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.log.Close()
	s.cmd = nil
}

// Restart stops the server and starts a new one on the same port and database.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	var err error
	for try := 0; try < 5; try++ { // the port may take a moment to be free again
		if err = s.start(s.Target); err == nil {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

// Starts returns how many processes were started (1 + restarts).
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Logs returns the servers' stderr, for a failing test.
func (s *Server) Logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(s.dir, "server-*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s", filepath.Base(f), data)
	}
	return b.String()
}

// Stop ends the server and removes its directory.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	os.RemoveAll(s.dir)
}
