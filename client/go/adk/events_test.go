package adk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/adk"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

func event(author string, parts ...*genai.Part) *session.Event {
	role := genai.RoleModel
	if author == "user" {
		role = genai.RoleUser
	}
	return &session.Event{
		ID: "e1", InvocationID: "inv1", Author: author, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		LLMResponse: model.LLMResponse{Content: genai.NewContentFromParts(parts, genai.Role(role))},
	}
}

func tb(s string) *ctxwardenv1.ContentBlock {
	return &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Text{Text: &ctxwardenv1.TextContent{Text: s}}}
}

// TestEventMapping: what becomes which block (the Python adapter's mapping),
// and every event comes back equal from its message.
func TestEventMapping(t *testing.T) {
	call := genai.NewPartFromFunctionCall("lookup", map[string]any{"item": 3, "deep": map[string]any{"n": 1.5}})
	call.FunctionCall.ID = "call-3"
	noID := genai.NewPartFromFunctionCall("lookup", map[string]any{"item": 4})
	response := genai.NewPartFromFunctionResponse("lookup", map[string]any{"price": 13})
	response.FunctionResponse.ID = "call-3"
	noIDResponse := genai.NewPartFromFunctionResponse("lookup", map[string]any{"price": 14})
	image := genai.NewPartFromBytes([]byte("\x89PNG..."), "image/png")
	thought := &genai.Part{Text: "hmm", Thought: true}
	stateOnly := &session.Event{ID: "e2", Author: "clerk", Actions: session.EventActions{StateDelta: map[string]any{"k": "v"}}}
	bigInt := genai.NewPartFromFunctionCall("lookup", map[string]any{"n": uint64(12345678901234567890)})
	bigInt.FunctionCall.ID = "call-big"

	for _, tc := range []struct {
		name        string
		event       *session.Event
		role        ctxwardenv1.Role
		blocks      []*ctxwardenv1.ContentBlock
		historyOnly bool
		lossy       bool // decoded into map[string]any, the number comes back a float64 (as from any JSON)
	}{
		{"user text", event("user", genai.NewPartFromText("hi <b>")), ctxwardenv1.Role_ROLE_USER, []*ctxwardenv1.ContentBlock{tb("hi <b>")}, false, false},
		{"model text and call", event("clerk", genai.NewPartFromText("Let me look."), call), ctxwardenv1.Role_ROLE_ASSISTANT,
			[]*ctxwardenv1.ContentBlock{tb("Let me look."), {Block: &ctxwardenv1.ContentBlock_ToolCall{ToolCall: &ctxwardenv1.ToolCall{
				Id: "call-3", Name: "lookup", ArgumentsJson: `{"deep":{"n":1.5},"item":3}`}}}}, false, false},
		{"call without an ID stays whole", event("clerk", noID), ctxwardenv1.Role_ROLE_ASSISTANT, nil, true, false},
		{"function response", event("clerk", response), ctxwardenv1.Role_ROLE_TOOL_RESULT, []*ctxwardenv1.ContentBlock{tb(`{"price":13}`)}, false, false},
		{"responses without an ID stay whole", event("clerk", noIDResponse, noIDResponse), ctxwardenv1.Role_ROLE_ASSISTANT, nil, true, false},
		{"image", event("user", image), ctxwardenv1.Role_ROLE_USER, []*ctxwardenv1.ContentBlock{{Block: &ctxwardenv1.ContentBlock_Image{
			Image: &ctxwardenv1.ImageContent{MimeType: "image/png", Data: []byte("\x89PNG...")}}}}, false, false},
		{"thought stays whole", event("clerk", thought, genai.NewPartFromText("ok")), ctxwardenv1.Role_ROLE_ASSISTANT, []*ctxwardenv1.ContentBlock{tb("ok")}, false, false},
		{"state only", stateOnly, ctxwardenv1.Role_ROLE_ASSISTANT, nil, true, false},
		{"a big integer argument", event("clerk", bigInt), ctxwardenv1.Role_ROLE_ASSISTANT,
			[]*ctxwardenv1.ContentBlock{{Block: &ctxwardenv1.ContentBlock_ToolCall{ToolCall: &ctxwardenv1.ToolCall{
				Id: "call-big", Name: "lookup", ArgumentsJson: `{"n":12345678901234567890}`}}}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			messages, err := adk.EventToMessages(tc.event)
			if err != nil {
				t.Fatal(err)
			}
			if len(messages) != 1 {
				t.Fatalf("%d messages", len(messages))
			}
			msg := messages[0]
			if msg.GetRole() != tc.role {
				t.Errorf("role %s, want %s", msg.GetRole(), tc.role)
			}
			if diff := cmp.Diff(tc.blocks, msg.GetContent(), protocmp.Transform()); diff != "" {
				t.Errorf("blocks (-want +got):\n%s", diff)
			}
			historyOnly := msg.GetVisibility() == ctxwardenv1.MessageVisibility_MESSAGE_VISIBILITY_HISTORY_ONLY
			if historyOnly != tc.historyOnly {
				t.Errorf("history only: %v, want %v", historyOnly, tc.historyOnly)
			}
			if tc.role == ctxwardenv1.Role_ROLE_TOOL_RESULT && (msg.GetToolCallId() != "call-3" || msg.GetToolName() != "lookup") {
				t.Errorf("tool result of %q (%q)", msg.GetToolCallId(), msg.GetToolName())
			}
			// As stored and read back (the wire), then rebuilt.
			b, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			stored := &ctxwardenv1.Message{}
			if err := proto.Unmarshal(b, stored); err != nil {
				t.Fatal(err)
			}
			back, err := adk.MessagesToEvent(stored)
			if err != nil {
				t.Fatal(err)
			}
			if jsonOf(t, back) != jsonOf(t, tc.event) && !tc.lossy {
				t.Errorf("round trip:\n got %s\nwant %s", jsonOf(t, back), jsonOf(t, tc.event))
			}
		})
	}
	if e, err := adk.MessagesToEvent(&ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_USER, Content: []*ctxwardenv1.ContentBlock{tb("summary")}}); e != nil || err != nil {
		t.Errorf("a message without an envelope: %v, %v; want nil, nil", e, err)
	}
}

func TestSessionKey(t *testing.T) {
	key, err := adk.SessionKey("adk", "my app", "u1", "s:1", "é.")
	if err != nil || key != "adk:my.20app:u1:s.3A1:.C3.A9.2E" {
		t.Fatalf("SessionKey: %q, %v", key, err)
	}
	ns, parts, err := adk.SplitSessionKey(key)
	if err != nil || ns != "adk" || cmp.Diff([]string{"my app", "u1", "s:1", "é."}, parts) != "" {
		t.Errorf("SplitSessionKey: %q %q %v", ns, parts, err)
	}
	for _, bad := range []string{"adk:a.b", "adk:.2", "adk:.zz", "adk:.FF"} {
		if _, _, err := adk.SplitSessionKey(bad); err == nil {
			t.Errorf("SplitSessionKey(%q) did not fail", bad)
		}
	}
	if _, err := adk.SessionKey("a:b"); err == nil {
		t.Error("SessionKey accepted the namespace a:b")
	}
}

// TestEventManyResponses: an event answering several calls is one tool result
// per call, and comes back whole from them, among other events' messages.
func TestEventManyResponses(t *testing.T) {
	var parts []*genai.Part
	for i, id := range []string{"call-a", "call-b", "call-c"} {
		p := genai.NewPartFromFunctionResponse("lookup", map[string]any{"price": 10 + i})
		p.FunctionResponse.ID = id
		parts = append(parts, p)
	}
	answers := event("clerk", parts...)
	messages, err := adk.EventToMessages(answers)
	if err != nil {
		t.Fatal(err)
	}
	if len(messages) != 3 {
		t.Fatalf("%d messages, want 3", len(messages))
	}
	for i, m := range messages {
		id := []string{"call-a", "call-b", "call-c"}[i]
		if m.GetRole() != ctxwardenv1.Role_ROLE_TOOL_RESULT || m.GetToolCallId() != id || m.GetToolName() != "lookup" ||
			len(m.GetContent()) != 1 || m.GetContent()[0].GetText().GetText() != fmt.Sprintf(`{"price":%d}`, 10+i) {
			t.Errorf("message %d: %v", i, m)
		}
		if hasEnvelope := m.GetMetadata()[adk.EventEnvelopeKey] != ""; hasEnvelope != (i == 0) {
			t.Errorf("message %d has an envelope: %v", i, hasEnvelope)
		}
		if want := fmt.Sprintf("%d:e1", i); i > 0 && m.GetMetadata()[adk.EventPartKey] != want {
			t.Errorf("message %d: part %q, want %q", i, m.GetMetadata()[adk.EventPartKey], want)
		}
	}
	before, _ := adk.EventToMessages(event("user", genai.NewPartFromText("hi")))
	after := &session.Event{ID: "e3", Author: "clerk", LLMResponse: model.LLMResponse{Content: genai.NewContentFromText("ok", genai.RoleModel)}}
	last, _ := adk.EventToMessages(after)
	summary := &ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_USER, Content: []*ctxwardenv1.ContentBlock{tb("summary")}}
	all := append(append(append([]*ctxwardenv1.Message{summary}, before...), messages...), last...)
	events, err := adk.EventsOf(all)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || jsonOf(t, events[1]) != jsonOf(t, answers) || events[2].ID != "e3" {
		t.Errorf("EventsOf: %s", jsonOf(t, events))
	}
}
