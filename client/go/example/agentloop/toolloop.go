package agentloop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

// ToolLoop is an agent's tool loop over an OpenAI Chat Completions endpoint
// in which the agent never converts messages itself: ctxwarden renders the
// request (BuildModelInput, format OPENAI_CHAT), the agent POSTs it, and
// ctxwarden reads the answer back (AppendModelOutput with the response body,
// or the chunks of a streamed call) and the agent's tool results (as Chat
// "tool" messages). The tool calls to run come from the messages ctxwarden
// stored.
type ToolLoop struct {
	// BaseURL is the API's base, e.g. "https://api.openai.com/v1".
	BaseURL string
	// APIKey is sent as the bearer token.
	APIKey string
	// Model is the request's "model" (and the session's model).
	Model string
	// Stream tells whether model call n (from 1) is streamed. Nil: never.
	Stream func(n int) bool
	// HTTPClient makes the calls. Nil: http.DefaultClient.
	HTTPClient *http.Client
	// MaxCalls bounds the model calls of one Run. 0: 10.
	MaxCalls int
}

// toolMessage is a Chat Completions tool message: the provider-format item
// the agent writes for a tool result.
type toolMessage struct {
	Role       string `json:"role"`
	ToolCallID string `json:"tool_call_id"`
	Content    string `json:"content"`
}

// Run creates a session (system prompt, Tools, the loop's model), appends the
// question and calls the model until it answers without tool calls, running
// each tool call with RunTool. It writes labelled lines to out and returns the
// session ID and the final answer as ctxwarden stored it.
func (l *ToolLoop) Run(ctx context.Context, c ctxwardenv1.ContextServiceClient, question string, out io.Writer) (string, *ctxwardenv1.Message, error) {
	p := func(format string, args ...interface{}) { fmt.Fprintf(out, format+"\n", args...) }
	session, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: &ctxwardenv1.Session{
		Title:        "go tool loop",
		SystemPrompt: ToolLoopSystemPrompt,
		Tools:        Tools,
		Model:        l.Model,
	}})
	if err != nil {
		return "", nil, fmt.Errorf("CreateSession: %w", err)
	}
	sid := session.GetSessionId()
	p("session: %s", sid)
	const chat = ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT
	userItems, err := json.Marshal([]map[string]string{{"role": "user", "content": question}})
	if err != nil {
		return sid, nil, err
	}
	// Each append has a request_id, so that one retried after a lost answer
	// (Dial retries UNAVAILABLE) applies once.
	userReq := ctxwarden.ModelItems(sid, chat, userItems)
	userReq.RequestId = "question"
	if _, err := c.AppendModelOutput(ctx, userReq); err != nil {
		return sid, nil, fmt.Errorf("AppendModelOutput(user): %w", err)
	}

	maxCalls := l.MaxCalls
	if maxCalls == 0 {
		maxCalls = 10
	}
	inputs := ctxwarden.NewInputCache(1) // each input resumes the last: only what is new crosses the wire
	for n := 1; n <= maxCalls; n++ {
		stream := l.Stream != nil && l.Stream(n)
		in, err := inputs.Build(ctx, c, &ctxwardenv1.BuildModelInputRequest{SessionId: sid, Format: chat})
		if err != nil {
			return sid, nil, fmt.Errorf("BuildModelInput: %w", err)
		}
		output, err := l.call(ctx, in, stream) // the body, or the streamed chunks as a JSON array
		if err != nil {
			return sid, nil, fmt.Errorf("model call %d: %w", n, err)
		}
		outputReq := ctxwarden.ModelOutput(sid, chat, output)
		outputReq.RequestId = fmt.Sprintf("model-call-%d", n)
		stored, err := c.AppendModelOutput(ctx, outputReq)
		if err != nil {
			return sid, nil, fmt.Errorf("AppendModelOutput(model call %d): %w", n, err)
		}
		answer := stored.GetMessages()[0]
		u := answer.GetUsage()
		p("model call %d: stream=%t seq=%d stop_reason=%s usage=in:%d,cache_read:%d,out:%d",
			n, stream, answer.GetSeq(), answer.GetStopReason(), u.GetInputTokens(), u.GetCacheReadTokens(), u.GetOutputTokens())
		if answer.GetStopReason() != ctxwardenv1.StopReason_STOP_REASON_TOOL_USE {
			return sid, answer, nil
		}
		var results []toolMessage
		for _, tc := range ctxwarden.ToolCalls(answer) {
			result := RunTool(tc.GetName(), tc.GetArgumentsJson())
			p("tool %s %s: %d bytes", tc.GetName(), tc.GetArgumentsJson(), len(result))
			results = append(results, toolMessage{Role: "tool", ToolCallID: tc.GetId(), Content: result})
		}
		items, err := json.Marshal(results)
		if err != nil {
			return sid, nil, err
		}
		resultsReq := ctxwarden.ModelItems(sid, chat, items)
		resultsReq.RequestId = fmt.Sprintf("tool-results-%d", n)
		if _, err := c.AppendModelOutput(ctx, resultsReq); err != nil {
			return sid, nil, fmt.Errorf("AppendModelOutput(tool results): %w", err)
		}
	}
	return sid, nil, fmt.Errorf("no final answer after %d model calls", maxCalls)
}

// ToolLoopSystemPrompt is the tool loop session's system prompt.
const ToolLoopSystemPrompt = "You are a careful coding agent. Use the tools to read the project before answering."

// call POSTs the rendered input with the loop's parameters and returns what
// AppendModelOutput takes: the response body, or the JSON array of the chunk
// payloads of a streamed call.
func (l *ToolLoop) call(ctx context.Context, in *ctxwardenv1.ModelInput, stream bool) ([]byte, error) {
	params := map[string]interface{}{"model": l.Model, "stream": stream}
	if stream {
		params["stream_options"] = map[string]bool{"include_usage": true}
	}
	body, err := ctxwarden.RequestBody(in, params)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+l.APIKey)
	hc := l.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A real agent records the failed call and asks RollbackTurn what to do
		// (see RunExample).
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return ctxwarden.ReadResponse(resp)
}
