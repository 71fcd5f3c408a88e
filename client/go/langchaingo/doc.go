// Package langchaingo keeps LangChainGo (github.com/tmc/langchaingo) chat
// histories in ctxwarden.
//
//	client, _ := ctxwarden.Dial(ctx, "127.0.0.1:50051")
//	history, _ := langchaingo.NewChatMessageHistory(client, "thread-1", langchaingo.WithSummarizer(summarize))
//	mem := memory.NewConversationBuffer(memory.WithChatHistory(history))
//
// ChatMessageHistory is LangChainGo's schema.ChatMessageHistory: Messages is
// the session's effective context (after a compaction, the summary and the
// kept messages). ToMessage and FromMessage are the message mapping. They
// follow the Python adapter, ctxwarden_client.integrations.langchain.
package langchaingo
