package ctxwarden

import (
	"context"
	"fmt"

	"google.golang.org/grpc/credentials"
)

// apiKeyCredentials send "authorization: Bearer <key>" on every call, the
// header a server started with --api-keys-file (or --jwt-jwks-file, for a JWT)
// checks.
type apiKeyCredentials struct {
	key        string
	requireTLS bool
}

func (c *apiKeyCredentials) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if c.requireTLS {
		ri, _ := credentials.RequestInfoFromContext(ctx)
		if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
			return nil, fmt.Errorf("ctxwarden: the API key is sent over TLS only: %w", err)
		}
	}
	return map[string]string{"authorization": "Bearer " + c.key}, nil
}

func (c *apiKeyCredentials) RequireTransportSecurity() bool { return c.requireTLS }

// APIKeyCredentials returns per-RPC credentials that send key as
// "authorization: Bearer <key>" (an API key of the server's --api-keys-file,
// or a JWT), over TLS only: RequireTransportSecurity reports true, so grpc-go
// refuses them on a plaintext connection. Use them with raw grpc-go, as
// grpc.WithPerRPCCredentials or the grpc.PerRPCCredentials call option;
// with Dial, use WithAPIKey.
func APIKeyCredentials(key string) credentials.PerRPCCredentials {
	return &apiKeyCredentials{key: key, requireTLS: true}
}

// WithAPIKey authenticates every call with key ("authorization: Bearer <key>",
// see APIKeyCredentials). The key is sent over TLS only, so this needs
// WithTransportCredentials (e.g. credentials.NewTLS or
// credentials.NewClientTLSFromFile); on the default plaintext transport Dial
// fails. For a loopback (or otherwise trusted) plaintext connection use
// WithInsecureAPIKey. An empty key makes Dial fail.
func WithAPIKey(key string) Option {
	return func(o *options) { o.apiKey = &apiKeyCredentials{key: key, requireTLS: true} }
}

// WithInsecureAPIKey is WithAPIKey without the TLS requirement: the key also
// goes over a plaintext connection, readable by anyone on the path. Use it only
// to reach a sidecar on loopback or a Unix socket.
func WithInsecureAPIKey(key string) Option {
	return func(o *options) { o.apiKey = &apiKeyCredentials{key: key, requireTLS: false} }
}
