package ctxwarden_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const testAPIKey = "ck_test_0123456789abcdef"

// apiKeysFile writes a --api-keys-file that maps testAPIKey to tenant "acme".
func apiKeysFile(t *testing.T) string {
	t.Helper()
	sum := sha256.Sum256([]byte(testAPIKey))
	path := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(path, []byte("# tenant:sha256(key)\nacme:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// useSession creates a session, appends to it and builds its model input:
// the calls an agent makes.
func useSession(ctx context.Context, c *ctxwarden.Client) error {
	s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{})
	if err != nil {
		return err
	}
	if _, err := c.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{
		SessionId: s.GetSessionId(), Messages: []*ctxwardenv1.Message{ctxwarden.User("hi")}}); err != nil {
		return err
	}
	_, err = c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: s.GetSessionId()})
	return err
}

func wantUnauthenticated(t *testing.T, what string, err error, reason string) {
	t.Helper()
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("%s: %v, want UNAUTHENTICATED", what, err)
	}
	if got := ctxwarden.ErrorReason(err); got != reason {
		t.Errorf("%s: ErrorReason = %q, want %q", what, got, reason)
	}
}

// TestAPIKeyLoopback runs a server that requires an API key on loopback
// plaintext: calls without the key, or with a wrong one, are refused; with
// WithInsecureAPIKey they succeed; WithAPIKey refuses to send it without TLS.
func TestAPIKeyLoopback(t *testing.T) {
	srv := testserver.Start(t, "--api-keys-file", apiKeysFile(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	wantUnauthenticated(t, "without a key", useSession(ctx, dial(t, srv.Target)), "MISSING_CREDENTIALS")
	wantUnauthenticated(t, "with a wrong key",
		useSession(ctx, dial(t, srv.Target, ctxwarden.WithInsecureAPIKey("ck_wrong"))), "INVALID_CREDENTIALS")
	if err := useSession(ctx, dial(t, srv.Target, ctxwarden.WithInsecureAPIKey(testAPIKey))); err != nil {
		t.Fatalf("WithInsecureAPIKey: %v", err)
	}

	// WithAPIKey needs TLS: Dial says so rather than sending the key in the clear.
	if c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithAPIKey(testAPIKey)); err == nil {
		c.Close()
		t.Fatal("Dial(WithAPIKey) on plaintext succeeded, want an error")
	} else if !strings.Contains(err.Error(), "WithInsecureAPIKey") {
		t.Errorf("Dial(WithAPIKey) on plaintext: %v, want a hint at WithInsecureAPIKey", err)
	}
	if c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithInsecureAPIKey("")); err == nil {
		c.Close()
		t.Fatal("Dial with an empty API key succeeded, want an error")
	}
	// Raw grpc-go with the credentials per call: refused on plaintext too.
	raw := dial(t, srv.Target)
	_, err := raw.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: "s"},
		grpc.PerRPCCredentials(ctxwarden.APIKeyCredentials(testAPIKey)))
	if err == nil || ctxwarden.ErrorReason(err) != "" { // no ErrorInfo: the server never saw it
		t.Errorf("APIKeyCredentials on plaintext: %v, want the call refused before it is sent", err)
	}
	t.Logf("APIKeyCredentials on plaintext: %v", err)
}

// TestAPIKeyTLS runs a server with TLS and an API key: WithAPIKey with
// WithTransportCredentials authenticates, the same connection without the key
// is refused.
func TestAPIKeyTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv := testserver.Start(t, "--api-keys-file", apiKeysFile(t), "--tls-cert", certFile, "--tls-key", keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tlsCreds := credentials.NewClientTLSFromCert(pool, "")

	c := dial(t, srv.Target, ctxwarden.WithTransportCredentials(tlsCreds), ctxwarden.WithAPIKey(testAPIKey))
	if err := useSession(ctx, c); err != nil {
		t.Fatalf("TLS + WithAPIKey: %v", err)
	}
	noKey := dial(t, srv.Target, ctxwarden.WithTransportCredentials(tlsCreds))
	wantUnauthenticated(t, "TLS without a key", useSession(ctx, noKey), "MISSING_CREDENTIALS")
	// APIKeyCredentials per call on a TLS connection.
	if _, err := noKey.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{},
		grpc.PerRPCCredentials(ctxwarden.APIKeyCredentials(testAPIKey))); err != nil {
		t.Fatalf("TLS + APIKeyCredentials per call: %v", err)
	}
}

// TestAPIKeyHeader checks the exact metadata sent: "authorization: Bearer <key>".
func TestAPIKeyHeader(t *testing.T) {
	if !ctxwarden.APIKeyCredentials("k").RequireTransportSecurity() {
		t.Error("APIKeyCredentials: RequireTransportSecurity() = false, want true")
	}
	got := make(chan []string, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req interface{}, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (interface{}, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- md.Get("authorization")
		return &ctxwardenv1.Session{}, nil
	}))
	ctxwardenv1.RegisterContextServiceServer(s, &fakeServer{})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)

	c := dial(t, lis.Addr().String(), ctxwarden.WithInsecureAPIKey(testAPIKey))
	if _, err := c.GetSession(context.Background(), &ctxwardenv1.GetSessionRequest{SessionId: "s"}); err != nil {
		t.Fatal(err)
	}
	if h := <-got; len(h) != 1 || h[0] != "Bearer "+testAPIKey {
		t.Errorf("authorization metadata = %q, want [\"Bearer %s\"]", h, testAPIKey)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key, and
// returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ctxwarden test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
