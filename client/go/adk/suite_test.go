package adk_test

import (
	"fmt"
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/adk"
	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/session/sessiontestsuite"
)

// TestSessionServiceSuite runs ADK's own test suite of session.Service
// (session/sessiontestsuite, the one ADK runs against its in-memory, database
// and Vertex AI services), unmodified, against SessionService on a real
// server. Each setup gets its own namespace and project prefix: a fresh,
// empty service on the shared server.
func TestSessionServiceSuite(t *testing.T) {
	client := dial(t, server(t))
	run, n := token(t), 0
	sessiontestsuite.RunServiceTests(t, sessiontestsuite.SuiteOptions{SupportsUserProvidedSessionID: true},
		func(t *testing.T) session.Service {
			n++
			name := fmt.Sprintf("suite%d-%s", n, run)
			service, err := adk.NewSessionService(client, adk.WithNamespace(name), adk.WithProjectPrefix(name+"/"))
			if err != nil {
				t.Fatal(err)
			}
			return service
		})
}
