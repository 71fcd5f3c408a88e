package ctxwarden

import "github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"

func textBlock(text string) *ctxwardenv1.ContentBlock {
	return &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Text{
		Text: &ctxwardenv1.TextContent{Text: text},
	}}
}

// User returns a user message with one text block.
func User(text string) *ctxwardenv1.Message {
	return &ctxwardenv1.Message{
		Role:    ctxwardenv1.Role_ROLE_USER,
		Content: []*ctxwardenv1.ContentBlock{textBlock(text)},
	}
}

// Assistant returns an assistant message: a text block (left out when text is
// empty) followed by the tool calls. Its stop reason is STOP_REASON_TOOL_USE
// when there are calls, STOP_REASON_STOP otherwise.
func Assistant(text string, calls ...*ctxwardenv1.ToolCall) *ctxwardenv1.Message {
	m := &ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_ASSISTANT, StopReason: ctxwardenv1.StopReason_STOP_REASON_STOP}
	if text != "" {
		m.Content = append(m.Content, textBlock(text))
	}
	for _, c := range calls {
		m.Content = append(m.Content, &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_ToolCall{ToolCall: c}})
	}
	if len(calls) > 0 {
		m.StopReason = ctxwardenv1.StopReason_STOP_REASON_TOOL_USE
	}
	return m
}

// FailedAssistant records a model call that failed with the provider error
// errorMessage (STOP_REASON_ERROR, no content). Append it, then call
// RollbackTurn to learn whether to retry, compact or give up.
func FailedAssistant(errorMessage string) *ctxwardenv1.Message {
	return &ctxwardenv1.Message{
		Role:         ctxwardenv1.Role_ROLE_ASSISTANT,
		StopReason:   ctxwardenv1.StopReason_STOP_REASON_ERROR,
		ErrorMessage: errorMessage,
	}
}

// ToolCall returns a tool call for Assistant. argsJSON is the arguments as a
// JSON object text ("" means "{}").
func ToolCall(id, name, argsJSON string) *ctxwardenv1.ToolCall {
	return &ctxwardenv1.ToolCall{Id: id, Name: name, ArgumentsJson: argsJSON}
}

// ToolResult returns the result of the tool call callID as a tool-result
// message with one text block. Set IsError or ToolName on it as needed.
func ToolResult(callID, text string) *ctxwardenv1.Message {
	return &ctxwardenv1.Message{
		Role:       ctxwardenv1.Role_ROLE_TOOL_RESULT,
		ToolCallId: callID,
		Content:    []*ctxwardenv1.ContentBlock{textBlock(text)},
	}
}

// ToolCalls returns the tool calls of m, in order: the ToolCall blocks of its
// content (an assistant message that stopped with STOP_REASON_TOOL_USE, e.g.
// the one AppendModelOutput stored). It returns nil when m is nil or has none.
// The calls are m's own: answer each with a ToolResult(call.GetId(), ...).
func ToolCalls(m *ctxwardenv1.Message) []*ctxwardenv1.ToolCall {
	var calls []*ctxwardenv1.ToolCall
	for _, b := range m.GetContent() {
		if c := b.GetToolCall(); c != nil {
			calls = append(calls, c)
		}
	}
	return calls
}
