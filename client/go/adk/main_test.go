package adk_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"os"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/adk/internal/cwserver"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"google.golang.org/grpc"
)

// One server for the package's tests, started on first use (a start takes
// seconds); TestRunnerLoop restarts it. The tests do not run in parallel.
var (
	sharedOnce sync.Once
	shared     *cwserver.Server
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

func server(t *testing.T) *cwserver.Server {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = cwserver.Start() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server logs:\n%s", shared.Logs())
		}
	})
	return shared
}

// dial connects to srv; calls wait for the connection (WaitForReady), so a
// call made while the server restarts waits for it instead of failing.
func dial(t *testing.T, srv *cwserver.Server) *ctxwarden.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := ctxwarden.Dial(ctx, srv.Target,
		ctxwarden.WithDialOptions(grpc.WithDefaultCallOptions(grpc.WaitForReady(true))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// token is a random suffix, so names do not collide with another run's.
func token(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
