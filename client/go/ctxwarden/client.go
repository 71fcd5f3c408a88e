package ctxwarden

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// DefaultTarget is the address ctxwarden serve listens on by default.
const DefaultTarget = "127.0.0.1:50051"

// DefaultTimeout is the deadline given to a unary call whose context has none.
const DefaultTimeout = 30 * time.Second

// MaxMessageBytes matches the server's gRPC message limit (64 MiB), so large
// ListMessages pages or model inputs are not refused by the client's default
// 4 MiB receive limit.
const MaxMessageBytes = 64 << 20

// DefaultServiceConfig retries every ContextService call that fails with
// UNAVAILABLE (server not reachable yet, connection reset, summariser
// unavailable): up to 3 attempts with jittered exponential backoff.
//
// A retried AppendMessages or CreateSession whose first attempt reached the
// server could apply twice; set request_id (or Message.message_id) on such
// requests to make the retry replay the first result instead.
const DefaultServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "ctxwarden.v1.ContextService"}],
    "retryPolicy": {
      "maxAttempts": 3,
      "initialBackoff": "0.1s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// DefaultKeepalive pings an idle connection that has calls in flight every
// 5 minutes. The server (gRPC core defaults) treats pings closer together than
// 5 minutes without data as abuse and closes the connection after 2 strikes,
// so a shorter interval would break long-lived StreamMessages streams.
var DefaultKeepalive = keepalive.ClientParameters{
	Time:                5 * time.Minute,
	Timeout:             20 * time.Second,
	PermitWithoutStream: false,
}

// Client is a connection to a ctxwarden server. Every ContextService RPC is
// available directly on it (it embeds the generated client). Close it when done.
type Client struct {
	ctxwardenv1.ContextServiceClient
	conn *grpc.ClientConn
}

// Conn returns the underlying connection, e.g. for the grpc.health.v1 client.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Option configures Dial.
type Option func(*options)

type options struct {
	timeout       time.Duration
	creds         credentials.TransportCredentials
	serviceConfig string
	keepalive     keepalive.ClientParameters
	block         bool
	apiKey        *apiKeyCredentials
	extra         []grpc.DialOption
}

// WithTimeout sets the deadline given to unary calls whose context has none
// (default DefaultTimeout). 0 disables the default deadline. Streams never get
// a default deadline.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithTransportCredentials replaces the default plaintext transport, e.g. with
// TLS when the server is not a loopback sidecar.
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = c }
}

// WithServiceConfig replaces DefaultServiceConfig ("" sets none, which turns
// retries off).
func WithServiceConfig(json string) Option { return func(o *options) { o.serviceConfig = json } }

// WithKeepalive replaces DefaultKeepalive.
func WithKeepalive(k keepalive.ClientParameters) Option { return func(o *options) { o.keepalive = k } }

// WithBlock makes Dial wait until the connection is ready (or ctx is done;
// Dial then fails with ctx's error). By default Dial returns at once and
// connects in the background.
func WithBlock() Option { return func(o *options) { o.block = true } }

// WithDialOptions appends raw gRPC dial options (applied after the defaults,
// so they win), e.g. more interceptors. Dial creates the connection with
// grpc.NewClient, which ignores grpc.WithBlock, grpc.WithTimeout and
// grpc.FailOnNonTempDialError: use WithBlock and ctx instead.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.extra = append(o.extra, opts...) }
}

// Dial connects to a ctxwarden server at target ("host:port" or any gRPC
// target, e.g. "dns:///ctxwarden.internal:50051" or "unix:///run/ctxwarden.sock").
// Defaults: plaintext (the sidecar listens on loopback), a DefaultTimeout
// deadline on unary calls without one, DefaultServiceConfig (retry
// UNAVAILABLE), DefaultKeepalive and MaxMessageBytes limits. The connection is
// made with grpc.NewClient and starts connecting at once, in the background;
// ctx bounds the dial only with WithBlock.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	o := options{
		timeout:       DefaultTimeout,
		serviceConfig: DefaultServiceConfig,
		keepalive:     DefaultKeepalive,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.apiKey != nil && o.apiKey.key == "" {
		return nil, fmt.Errorf("ctxwarden: dial %s: empty API key", target)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithKeepaliveParams(o.keepalive),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageBytes),
			grpc.MaxCallSendMsgSize(MaxMessageBytes),
		),
	}
	if o.creds != nil {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(o.creds))
	} else {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if o.apiKey != nil {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(o.apiKey))
	}
	if o.serviceConfig != "" {
		dialOpts = append(dialOpts, grpc.WithDefaultServiceConfig(o.serviceConfig))
	}
	if o.timeout > 0 {
		dialOpts = append(dialOpts, grpc.WithChainUnaryInterceptor(defaultDeadline(o.timeout)))
	}
	dialOpts = append(dialOpts, o.extra...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		if o.apiKey != nil && o.apiKey.requireTLS && o.creds == nil {
			return nil, fmt.Errorf("ctxwarden: dial %s: %w (WithAPIKey sends the key over TLS only: "+
				"add WithTransportCredentials, or use WithInsecureAPIKey on a loopback connection)", target, err)
		}
		return nil, fmt.Errorf("ctxwarden: dial %s: %w", target, err)
	}
	// Like grpc.Dial did: connect now rather than on the first call.
	conn.Connect()
	if o.block {
		if err := waitReady(ctx, conn); err != nil {
			conn.Close()
			return nil, fmt.Errorf("ctxwarden: dial %s: %w", target, err)
		}
	}
	return &Client{ContextServiceClient: ctxwardenv1.NewContextServiceClient(conn), conn: conn}, nil
}

// waitReady waits until conn is ready or ctx is done (then it returns ctx's
// error). Failed connection attempts are retried with backoff meanwhile.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return fmt.Errorf("connection closed")
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// defaultDeadline gives a unary call a deadline of d when ctx has none. The
// deadline covers all retry attempts.
func defaultDeadline(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply interface{},
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
