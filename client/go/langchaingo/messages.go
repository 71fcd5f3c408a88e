package langchaingo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/tmc/langchaingo/llms"
)

// MessageEnvelopeKey is the message metadata key under which ToMessage keeps
// what the content blocks do not hold of a LangChainGo message. (The Python
// adapter keeps LangChain's own under "ctxwarden.langchain_message": each
// reads the other's messages as the plain message of their role.)
const MessageEnvelopeKey = "ctxwarden.langchaingo_message"

// envelope is the JSON under MessageEnvelopeKey.
type envelope struct {
	// Type is the message's llms.ChatMessageType.
	Type string `json:"type"`
	// Role and Name of a GenericChatMessage, Name of a FunctionChatMessage.
	Role string `json:"role,omitempty"`
	Name string `json:"name,omitempty"`
	// ID of a ToolChatMessage without an ID (a USER message).
	NoToolCallID bool `json:"no_tool_call_id,omitempty"`
	// AIChatMessage fields the blocks do not hold.
	FunctionCall     *llms.FunctionCall `json:"function_call,omitempty"`
	ReasoningContent string             `json:"reasoning_content,omitempty"`
	// Calls: per tool call block, what it does not hold: the call's Type,
	// and its Arguments when they are not a JSON object text (the block then
	// has {"__arg1": arguments}, LangChainGo's convention for a string input).
	Calls []callRest `json:"calls,omitempty"`
	// WholeCalls: the tool calls, when one of them has no ID or name (they
	// then have no blocks). Not llms.ToolCall: its JSON does not round-trip.
	WholeCalls []wholeCall `json:"whole_calls,omitempty"`
}

type wholeCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type,omitempty"`
	Function *llms.FunctionCall `json:"function,omitempty"`
}

type callRest struct {
	Type string  `json:"type,omitempty"`
	Args *string `json:"args,omitempty"`
}

// ToMessage returns the ctxwarden message of a LangChainGo chat message, the
// mapping of the Python adapter (ctxwarden_client.integrations.langchain_messages):
//
//   - HumanChatMessage: a USER message; AIChatMessage: an ASSISTANT message,
//     its text then its tool calls as tool call blocks; ToolChatMessage: a
//     TOOL_RESULT message (tool_call_id its ID).
//   - SystemChatMessage, GenericChatMessage, FunctionChatMessage (and a
//     ToolChatMessage without an ID): USER messages, ctxwarden's system prompt
//     being the session's.
//   - The text is one text block; what the blocks do not hold (the message's
//     type, a generic message's role and name, a legacy function call,
//     reasoning content, a tool call's type) is a small JSON envelope in the
//     message metadata under MessageEnvelopeKey, with which FromMessage gives
//     back an equal message.
func ToMessage(m llms.ChatMessage) (*ctxwardenv1.Message, error) {
	if m == nil {
		return nil, fmt.Errorf("ctxwarden langchaingo: a nil message")
	}
	env := envelope{Type: string(m.GetType())}
	msg := &ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_USER, Content: []*ctxwardenv1.ContentBlock{textBlock(m.GetContent())}}
	switch v := m.(type) {
	case llms.AIChatMessage:
		msg.Role = ctxwardenv1.Role_ROLE_ASSISTANT
		env.FunctionCall, env.ReasoningContent = v.FunctionCall, v.ReasoningContent
		complete := len(v.ToolCalls) > 0
		for _, c := range v.ToolCalls {
			complete = complete && c.ID != "" && c.FunctionCall != nil && c.FunctionCall.Name != ""
		}
		if !complete {
			for _, c := range v.ToolCalls {
				env.WholeCalls = append(env.WholeCalls, wholeCall{ID: c.ID, Type: c.Type, Function: c.FunctionCall})
			}
			break
		}
		for _, c := range v.ToolCalls {
			rest := callRest{Type: c.Type}
			args := c.FunctionCall.Arguments
			if !isJSONObject(args) {
				raw := args
				rest.Args = &raw
				b, err := json.Marshal(map[string]string{"__arg1": args})
				if err != nil {
					return nil, err
				}
				args = string(b)
			}
			env.Calls = append(env.Calls, rest)
			msg.Content = append(msg.Content, &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_ToolCall{
				ToolCall: &ctxwardenv1.ToolCall{Id: c.ID, Name: c.FunctionCall.Name, ArgumentsJson: args}}})
		}
		msg.StopReason = ctxwardenv1.StopReason_STOP_REASON_TOOL_USE
	case llms.ToolChatMessage:
		if v.ID == "" {
			env.NoToolCallID = true
			break
		}
		msg.Role, msg.ToolCallId = ctxwardenv1.Role_ROLE_TOOL_RESULT, v.ID
	case llms.GenericChatMessage:
		env.Role, env.Name = v.Role, v.Name
	case llms.FunctionChatMessage:
		env.Name = v.Name
	case llms.HumanChatMessage, llms.SystemChatMessage:
	default:
		return nil, fmt.Errorf("ctxwarden langchaingo: unsupported message type %T", m)
	}
	b, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	msg.Metadata = map[string]string{MessageEnvelopeKey: string(b)}
	return msg, nil
}

// FromMessage returns the LangChainGo message a stored message was made from
// (with the text the message holds, e.g. a truncated tool output), or, for a
// message without an envelope (a compaction summary, one written by another
// client), the plain message of its role: USER a HumanChatMessage, ASSISTANT
// an AIChatMessage with its tool calls, TOOL_RESULT a ToolChatMessage.
func FromMessage(m *ctxwardenv1.Message) llms.ChatMessage {
	var text []string
	var calls []*ctxwardenv1.ToolCall
	for _, b := range m.GetContent() {
		if t := b.GetText(); t != nil {
			text = append(text, t.GetText())
		} else if c := b.GetToolCall(); c != nil {
			calls = append(calls, c)
		}
	}
	content := strings.Join(text, "")
	var env envelope
	if raw := m.GetMetadata()[MessageEnvelopeKey]; raw == "" || json.Unmarshal([]byte(raw), &env) != nil ||
		len(env.Calls) != 0 && len(env.Calls) != len(calls) {
		return plain(m, content, calls)
	}
	switch llms.ChatMessageType(env.Type) {
	case llms.ChatMessageTypeAI:
		ai := llms.AIChatMessage{Content: content, FunctionCall: env.FunctionCall, ReasoningContent: env.ReasoningContent}
		for _, c := range env.WholeCalls {
			ai.ToolCalls = append(ai.ToolCalls, llms.ToolCall{ID: c.ID, Type: c.Type, FunctionCall: c.Function})
		}
		for i, c := range calls {
			args := c.GetArgumentsJson()
			if env.Calls[i].Args != nil {
				args = *env.Calls[i].Args
			}
			ai.ToolCalls = append(ai.ToolCalls, llms.ToolCall{ID: c.GetId(), Type: env.Calls[i].Type,
				FunctionCall: &llms.FunctionCall{Name: c.GetName(), Arguments: args}})
		}
		return ai
	case llms.ChatMessageTypeHuman:
		return llms.HumanChatMessage{Content: content}
	case llms.ChatMessageTypeSystem:
		return llms.SystemChatMessage{Content: content}
	case llms.ChatMessageTypeGeneric:
		return llms.GenericChatMessage{Content: content, Role: env.Role, Name: env.Name}
	case llms.ChatMessageTypeFunction:
		return llms.FunctionChatMessage{Content: content, Name: env.Name}
	case llms.ChatMessageTypeTool:
		return llms.ToolChatMessage{ID: m.GetToolCallId(), Content: content}
	}
	return plain(m, content, calls)
}

func plain(m *ctxwardenv1.Message, content string, calls []*ctxwardenv1.ToolCall) llms.ChatMessage {
	switch m.GetRole() {
	case ctxwardenv1.Role_ROLE_ASSISTANT:
		ai := llms.AIChatMessage{Content: content}
		for _, c := range calls {
			args := c.GetArgumentsJson()
			if args == "" {
				args = "{}"
			}
			ai.ToolCalls = append(ai.ToolCalls, llms.ToolCall{ID: c.GetId(), Type: "function",
				FunctionCall: &llms.FunctionCall{Name: c.GetName(), Arguments: args}})
		}
		return ai
	case ctxwardenv1.Role_ROLE_TOOL_RESULT:
		return llms.ToolChatMessage{ID: m.GetToolCallId(), Content: content}
	}
	return llms.HumanChatMessage{Content: content}
}

func isJSONObject(text string) bool {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "{") {
		return false
	}
	d := json.NewDecoder(bytes.NewReader([]byte(text)))
	var v map[string]json.RawMessage
	return d.Decode(&v) == nil && !d.More()
}

func textBlock(text string) *ctxwardenv1.ContentBlock {
	return &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Text{Text: &ctxwardenv1.TextContent{Text: text}}}
}
