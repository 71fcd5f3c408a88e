package langchaingo_test

import (
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/langchaingo"
	"github.com/google/go-cmp/cmp"
	"github.com/tmc/langchaingo/llms"
)

// TestChatMessageHistory: the schema.ChatMessageHistory methods on a real
// server, tool calls and results included.
func TestChatMessageHistory(t *testing.T) {
	client := dial(t, server(t))
	ctx := t.Context()
	template := &ctxwardenv1.Session{SystemPrompt: "You are terse.", Model: "gpt-4o", UserId: "ada"}
	h, err := langchaingo.NewChatMessageHistory(client, "thread/"+token(t), langchaingo.WithTemplate(template))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.Messages(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Messages before the first write: %v, %v", got, err)
	}
	conversation := []llms.ChatMessage{
		llms.SystemChatMessage{Content: "Prices are in euros."},
		llms.HumanChatMessage{Content: "What does item 3 cost?"},
		llms.AIChatMessage{ToolCalls: []llms.ToolCall{toolCall("c1", "lookup", `{"item":3}`), toolCall("c2", "calculator", "10+3")}},
		llms.ToolChatMessage{ID: "c1", Content: `{"price":13}`},
		llms.ToolChatMessage{ID: "c2", Content: "13"},
	}
	if err := h.AddMessage(ctx, conversation[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.AddMessages(ctx, conversation[1:]); err != nil {
		t.Fatal(err)
	}
	if err := h.AddAIMessage(ctx, "13 euros."); err != nil {
		t.Fatal(err)
	}
	if err := h.AddUserMessage(ctx, "Thanks."); err != nil {
		t.Fatal(err)
	}
	want := append(append([]llms.ChatMessage{}, conversation...), llms.AIChatMessage{Content: "13 euros."}, llms.HumanChatMessage{Content: "Thanks."})
	got, err := h.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Messages (-want +got):\n%s", diff)
	}
	stored, err := client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: h.CtxwardenSessionID()})
	if err != nil || stored.GetLastSeq() != 7 || stored.GetSystemPrompt() != "You are terse." || stored.GetUserId() != "ada" {
		t.Fatalf("the session: %v, %v", stored, err)
	}
	if key, _ := langchaingo.SessionKey("lc", "thread/x"); key != "lc:thread.2Fx" || len(h.CtxwardenSessionID()) != len("lc:thread.2F")+8 {
		t.Errorf("session IDs: %q, %q", key, h.CtxwardenSessionID())
	}

	// SetMessages replaces; Clear empties and keeps the settings.
	if err := h.SetMessages(ctx, want[1:2]); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Messages(ctx); err != nil || !cmp.Equal(got, want[1:2]) {
		t.Errorf("after SetMessages: %v, %v", got, err)
	}
	if err := h.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Messages(ctx); err != nil || len(got) != 0 {
		t.Errorf("after Clear: %v, %v", got, err)
	}
	cleared, err := client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: h.CtxwardenSessionID()})
	if err != nil || cleared.GetLastSeq() != 0 || cleared.GetSystemPrompt() != "You are terse." || cleared.GetModel() != "gpt-4o" {
		t.Errorf("the cleared session: %v, %v", cleared, err)
	}
	// A session deleted behind the history's back is created again on the next write.
	if _, err := client.DeleteSession(ctx, &ctxwardenv1.DeleteSessionRequest{SessionId: h.CtxwardenSessionID()}); err != nil {
		t.Fatal(err)
	}
	if err := h.AddUserMessage(ctx, "Still there?"); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Messages(ctx); err != nil || !cmp.Equal(got, []llms.ChatMessage{llms.HumanChatMessage{Content: "Still there?"}}) {
		t.Errorf("after a deletion: %v, %v", got, err)
	}
}
