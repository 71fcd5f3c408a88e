// Package adk stores Google ADK Go (google.golang.org/adk/v2) sessions in
// ctxwarden and sends the model ctxwarden's effective context.
//
//	client, _ := ctxwarden.Dial(ctx, "127.0.0.1:50051")
//	service, _ := adk.NewSessionService(client)
//	contextPlugin := adk.NewContextPlugin(service, adk.WithSummarizer(summarize))
//	r, _ := runner.New(runner.Config{
//		AppName: "shop", Agent: agent, SessionService: service,
//		PluginConfig: runner.PluginConfig{Plugins: []*plugin.Plugin{contextPlugin.Plugin()}},
//	})
//
// SessionService is ADK's session.Service (sessions, events, the app:, user:
// and temp: state scopes); EventToMessages and MessagesToEvent are the event
// mapping; ContextPlugin edits each model request to follow the session's
// effective context (compaction summaries, truncated tool outputs). They
// follow the Python adapter, ctxwarden_client.integrations.adk.
package adk
