package langchaingo_test

import (
	"encoding/json"
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/langchaingo"
	"github.com/google/go-cmp/cmp"
	"github.com/tmc/langchaingo/llms"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

func tb(s string) *ctxwardenv1.ContentBlock {
	return &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Text{Text: &ctxwardenv1.TextContent{Text: s}}}
}

func call(id, name, args string) *ctxwardenv1.ContentBlock {
	return &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_ToolCall{ToolCall: &ctxwardenv1.ToolCall{Id: id, Name: name, ArgumentsJson: args}}}
}

func toolCall(id, name, args string) llms.ToolCall {
	return llms.ToolCall{ID: id, Type: "function", FunctionCall: &llms.FunctionCall{Name: name, Arguments: args}}
}

// TestMessageMapping: what becomes which role and block (the Python adapter's
// mapping), and every message comes back equal.
func TestMessageMapping(t *testing.T) {
	user, assistant, result := ctxwardenv1.Role_ROLE_USER, ctxwardenv1.Role_ROLE_ASSISTANT, ctxwardenv1.Role_ROLE_TOOL_RESULT
	for _, tc := range []struct {
		name    string
		message llms.ChatMessage
		role    ctxwardenv1.Role
		blocks  []*ctxwardenv1.ContentBlock
		callID  string
	}{
		{"human", llms.HumanChatMessage{Content: "hi <b>"}, user, []*ctxwardenv1.ContentBlock{tb("hi <b>")}, ""},
		{"empty human", llms.HumanChatMessage{}, user, []*ctxwardenv1.ContentBlock{tb("")}, ""},
		{"system", llms.SystemChatMessage{Content: "be brief"}, user, []*ctxwardenv1.ContentBlock{tb("be brief")}, ""},
		{"generic", llms.GenericChatMessage{Content: "x", Role: "critic", Name: "bob"}, user, []*ctxwardenv1.ContentBlock{tb("x")}, ""},
		{"function", llms.FunctionChatMessage{Name: "f", Content: "42"}, user, []*ctxwardenv1.ContentBlock{tb("42")}, ""},
		{"ai", llms.AIChatMessage{Content: "hello", ReasoningContent: "thought"}, assistant, []*ctxwardenv1.ContentBlock{tb("hello")}, ""},
		{"ai with tool calls", llms.AIChatMessage{Content: "Let me look.", ToolCalls: []llms.ToolCall{
			toolCall("c1", "lookup", `{"item":3}`), toolCall("c2", "calculator", "2+2")}}, assistant,
			[]*ctxwardenv1.ContentBlock{tb("Let me look."), call("c1", "lookup", `{"item":3}`), call("c2", "calculator", `{"__arg1":"2+2"}`)}, ""},
		{"ai with a call without an ID", llms.AIChatMessage{ToolCalls: []llms.ToolCall{toolCall("", "lookup", "{}")}}, assistant,
			[]*ctxwardenv1.ContentBlock{tb("")}, ""},
		{"ai with a legacy function call", llms.AIChatMessage{FunctionCall: &llms.FunctionCall{Name: "f", Arguments: "{}"}}, assistant,
			[]*ctxwardenv1.ContentBlock{tb("")}, ""},
		{"tool", llms.ToolChatMessage{ID: "c1", Content: `{"price":13}`}, result, []*ctxwardenv1.ContentBlock{tb(`{"price":13}`)}, "c1"},
		{"tool without an ID", llms.ToolChatMessage{Content: "?"}, user, []*ctxwardenv1.ContentBlock{tb("?")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := langchaingo.ToMessage(tc.message)
			if err != nil {
				t.Fatal(err)
			}
			if m.GetRole() != tc.role || m.GetToolCallId() != tc.callID {
				t.Errorf("role %s, tool_call_id %q", m.GetRole(), m.GetToolCallId())
			}
			if diff := cmp.Diff(tc.blocks, m.GetContent(), protocmp.Transform()); diff != "" {
				t.Errorf("blocks (-want +got):\n%s", diff)
			}
			b, _ := proto.Marshal(m)
			stored := &ctxwardenv1.Message{}
			if err := proto.Unmarshal(b, stored); err != nil {
				t.Fatal(err)
			}
			if back := langchaingo.FromMessage(stored); !cmp.Equal(back, tc.message) {
				t.Errorf("round trip (-want +got):\n%s", cmp.Diff(tc.message, back))
			}
		})
	}
}

// TestPlainMessages: messages without an envelope (a compaction summary, the
// Python adapter's) come back as the plain message of their role.
func TestPlainMessages(t *testing.T) {
	for _, tc := range []struct {
		message *ctxwardenv1.Message
		want    llms.ChatMessage
	}{
		{&ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_USER, Content: []*ctxwardenv1.ContentBlock{tb("<summary>")}},
			llms.HumanChatMessage{Content: "<summary>"}},
		{&ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_ASSISTANT, Content: []*ctxwardenv1.ContentBlock{tb("ok"), call("c1", "f", "")}},
			llms.AIChatMessage{Content: "ok", ToolCalls: []llms.ToolCall{toolCall("c1", "f", "{}")}}},
		{&ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_TOOL_RESULT, ToolCallId: "c1", Content: []*ctxwardenv1.ContentBlock{tb("[truncated]")},
			Metadata: map[string]string{"ctxwarden.langchain_message": `{"type":"tool"}`}},
			llms.ToolChatMessage{ID: "c1", Content: "[truncated]"}},
	} {
		if got := langchaingo.FromMessage(tc.message); !cmp.Equal(got, tc.want) {
			b, _ := json.Marshal(got)
			t.Errorf("FromMessage: %s, want %#v", b, tc.want)
		}
	}
}
