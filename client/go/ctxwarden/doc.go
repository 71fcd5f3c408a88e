// Package ctxwarden is a thin Go client for the ctxwarden sidecar
// (gRPC service ctxwarden.v1.ContextService).
//
// The generated API lives in package ctxwardenv1; this package adds only what
// every caller would otherwise rewrite:
//
//   - Dial: a connection (grpc.NewClient) with sidecar defaults (plaintext for
//     a loopback sidecar, a default per-call deadline, retries of UNAVAILABLE
//     through the gRPC service config, keepalive settings the server accepts,
//     and message size limits matching the server's).
//   - API keys: WithAPIKey (over TLS, with WithTransportCredentials),
//     WithInsecureAPIKey (loopback plaintext), APIKeyCredentials (raw grpc-go):
//     "authorization: Bearer <key>" on every call.
//   - Message builders: User, Assistant, FailedAssistant, ToolCall, ToolResult;
//     ToolCalls reads the tool calls of a (stored) message.
//   - Provider-format helpers for AppendModelOutput: RequestBody (rendered_json
//     plus the agent's parameters), ReadResponse and ReadSSE (a response body,
//     or a streamed call's event payloads as a JSON array), ModelOutput and
//     ModelItems (the request builders).
//   - ErrorReason: the stable ErrorInfo.reason (e.g. "SESSION_NOT_FOUND") of a
//     failed call.
//   - InputCache: incremental BuildModelInput (send the held input's
//     resume_token, merge the messages the server sends after it).
//
// Client embeds ctxwardenv1.ContextServiceClient, so every RPC is called
// directly with the generated request types:
//
//	c, err := ctxwarden.Dial(ctx, "127.0.0.1:50051", ctxwarden.WithInsecureAPIKey(key))
//	...
//	defer c.Close()
//	s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{...})
package ctxwarden
