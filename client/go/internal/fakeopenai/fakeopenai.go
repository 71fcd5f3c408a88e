// Package fakeopenai is a stand-in OpenAI Chat Completions endpoint for the
// Go example and its tests: POST /v1/chat/completions on the real wire format
// (a chat.completion JSON body or, with "stream": true, SSE
// chat.completion.chunk events ending with [DONE]), driven by a scripted
// model that decides from the conversation it receives.
//
// It checks requests as the real API does (unknown parameters, message
// shapes, every tool call answered by a tool message right after it, tool
// messages answering a call) and answers 400 with an OpenAI error body when
// one is wrong. Every request body it receives is recorded (Requests).
//
// The script: the user asks about setup.py. With no tool result after the
// last user message the model calls read {"path":"setup.py"}; after one, it
// says so and calls grep (streamed, its arguments come in pieces); after two
// it answers in text.
package fakeopenai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"
)

// Path is the endpoint's path.
const Path = "/v1/chat/completions"

// The scripted model's tool calls and answer (see the package comment).
const (
	ReadCallID = "call_Y2pR8aQ1vK7mT3sN9wE4bH6c"
	ReadArgs   = `{"path":"setup.py"}`
	GrepCallID = "call_L5dJ0xF7uC2gZ8qA4rV1nM9k"
	GrepArgs   = `{"pattern":"requires","path":"."}`
	GrepNote   = "setup.py has no install_requires. Let me search the project for other requirements."
	Answer     = "setup.py packages demo 0.1 from src/ with setuptools, uses README.md as the long description " +
		"and installs a demo console script. It declares no dependencies: only python_requires >= 3.9."
)

// Usage is a Chat Completions usage object.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	Details          struct {
		CachedTokens int64 `json:"cached_tokens"`
		AudioTokens  int64 `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionDetails struct {
		ReasoningTokens          int64 `json:"reasoning_tokens"`
		AudioTokens              int64 `json:"audio_tokens"`
		AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

func usage(prompt, cached, completion int64) Usage {
	u := Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.Details.CachedTokens = cached
	return u
}

// Usages is the usage the scripted model reports on its first, second and
// third answer (prompt, cached and completion tokens).
var Usages = [3]Usage{usage(187, 0, 18), usage(702, 0, 41), usage(835, 640, 47)}

// Request is one request the provider received.
type Request struct {
	Header http.Header
	Body   []byte
}

// Provider is the endpoint; serve it with httptest.NewServer or http.Server.
// Base URL: the server's URL + "/v1".
type Provider struct {
	// APIKey, when set, is the bearer token the requests must carry.
	APIKey string

	mu       sync.Mutex
	requests []Request
}

// Requests returns the requests received so far, in order.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

type apiError struct {
	status  int
	message string
	param   interface{}
	kind    string
}

func badRequest(param interface{}, format string, args ...interface{}) *apiError {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...), param, "invalid_request_error"}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]interface{}{"error": map[string]interface{}{
		"message": e.message, "type": e.kind, "param": e.param, "code": nil,
	}})
}

// ServeHTTP answers POST /v1/chat/completions.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		writeError(w, &apiError{http.StatusNotFound, "Invalid URL (" + r.Method + " " + r.URL.Path + ")", nil, "invalid_request_error"})
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, &apiError{http.StatusMethodNotAllowed, "Method not allowed", nil, "invalid_request_error"})
		return
	}
	if p.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+p.APIKey {
		writeError(w, &apiError{http.StatusUnauthorized, "Incorrect API key provided.", nil, "invalid_request_error"})
		return
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(r.Body); err != nil {
		writeError(w, badRequest(nil, "could not read the body: %v", err))
		return
	}
	p.mu.Lock()
	p.requests = append(p.requests, Request{Header: r.Header.Clone(), Body: body.Bytes()})
	p.mu.Unlock()

	req, e := parseRequest(body.Bytes(), r.Header.Get("Content-Type"))
	if e != nil {
		writeError(w, e)
		return
	}
	reply, e := decide(req)
	if e != nil {
		writeError(w, e)
		return
	}
	if req.Stream {
		streamReply(w, req, reply)
		return
	}
	writeReply(w, req, reply)
}

// -- requests -----------------------------------------------------------------

type chatRequest struct {
	Model         string
	Stream        bool
	IncludeUsage  bool
	Messages      []message
	ToolNames     map[string]bool
	ToolResultsOf map[string]string // tool_call_id -> content, after the last user message
}

type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []toolCall      `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Refusal    *string         `json:"refusal"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

var knownParams = map[string]bool{
	"model": true, "messages": true, "tools": true, "tool_choice": true, "parallel_tool_calls": true,
	"stream": true, "stream_options": true, "temperature": true, "top_p": true, "n": true,
	"max_tokens": true, "max_completion_tokens": true, "stop": true, "seed": true, "user": true,
	"presence_penalty": true, "frequency_penalty": true, "logit_bias": true, "logprobs": true,
	"top_logprobs": true, "response_format": true, "reasoning_effort": true, "metadata": true,
	"store": true, "service_tier": true, "prediction": true, "modalities": true,
}

var messageKeys = map[string]map[string]bool{
	"system":    {"role": true, "content": true, "name": true},
	"developer": {"role": true, "content": true, "name": true},
	"user":      {"role": true, "content": true, "name": true},
	"assistant": {"role": true, "content": true, "name": true, "tool_calls": true, "refusal": true, "audio": true},
	"tool":      {"role": true, "content": true, "tool_call_id": true},
}

func parseRequest(body []byte, contentType string) (*chatRequest, *apiError) {
	if !strings.HasPrefix(contentType, "application/json") {
		return nil, badRequest(nil, "Content-Type must be application/json, got %q", contentType)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, badRequest(nil, "We could not parse the JSON body of your request: %v", err)
	}
	for k := range top {
		if !knownParams[k] {
			return nil, badRequest(k, "Unrecognized request argument supplied: %s", k)
		}
	}
	req := &chatRequest{ToolNames: map[string]bool{}, ToolResultsOf: map[string]string{}}
	if err := json.Unmarshal(top["model"], &req.Model); err != nil || req.Model == "" {
		return nil, badRequest("model", "you must provide a model parameter")
	}
	if raw, ok := top["stream"]; ok {
		if err := json.Unmarshal(raw, &req.Stream); err != nil {
			return nil, badRequest("stream", "Invalid type for 'stream': expected a boolean")
		}
	}
	if raw, ok := top["stream_options"]; ok && string(raw) != "null" {
		if !req.Stream {
			return nil, badRequest("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, badRequest("stream_options", "Invalid 'stream_options': %v", err)
		}
		req.IncludeUsage = so.IncludeUsage
	}
	if raw, ok := top["tools"]; ok {
		var tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, badRequest("tools", "Invalid 'tools': %v", err)
		}
		for i, t := range tools {
			if t.Type != "function" || t.Function.Name == "" {
				return nil, badRequest(fmt.Sprintf("tools[%d]", i), "Invalid tool: want type function with a name")
			}
			if len(t.Function.Parameters) > 0 && t.Function.Parameters[0] != '{' {
				return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters", i), "Invalid schema: must be an object")
			}
			req.ToolNames[t.Function.Name] = true
		}
	}
	var rawMessages []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &rawMessages); err != nil || len(rawMessages) == 0 {
		return nil, badRequest("messages", "Invalid 'messages': expected a non-empty array of objects")
	}
	open := map[string]bool{} // tool calls of the last assistant message not answered yet
	for i, raw := range rawMessages {
		param := fmt.Sprintf("messages.[%d]", i)
		var m message
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, badRequest(param, "Invalid message: %v", err)
		}
		keys, ok := messageKeys[m.Role]
		if !ok {
			return nil, badRequest(param+".role", "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.", m.Role)
		}
		for k := range raw {
			if !keys[k] {
				return nil, badRequest(param+"."+k, "Unrecognized argument in a %s message: %s", m.Role, k)
			}
		}
		if m.Role != "tool" && len(open) > 0 {
			return nil, badRequest("messages", "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", ids(open))
		}
		switch m.Role {
		case "system", "developer", "user":
			if !isString(m.Content) && !isArray(m.Content) {
				return nil, badRequest(param+".content", "Invalid type for content: expected a string or an array")
			}
			if m.Role == "user" {
				req.ToolResultsOf = map[string]string{}
			}
		case "assistant":
			if len(m.ToolCalls) == 0 && (isNull(m.Content) || string(m.Content) == `""`) {
				return nil, badRequest(param+".content", "Invalid value for 'content': expected a string, got null.")
			}
			if !isNull(m.Content) && !isString(m.Content) && !isArray(m.Content) {
				return nil, badRequest(param+".content", "Invalid type for content")
			}
			for j, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || c.Function.Name == "" || !json.Valid([]byte(c.Function.Arguments)) {
					return nil, badRequest(fmt.Sprintf("%s.tool_calls.[%d]", param, j), "Invalid tool call: want id, type function, function.name and function.arguments (a JSON string)")
				}
				open[c.ID] = true
			}
		case "tool":
			var text string
			if err := json.Unmarshal(m.Content, &text); err != nil {
				return nil, badRequest(param+".content", "Invalid type for content: this fake takes strings only")
			}
			if !open[m.ToolCallID] {
				return nil, badRequest(param+".role", "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			delete(open, m.ToolCallID)
			req.ToolResultsOf[m.ToolCallID] = text
		}
		req.Messages = append(req.Messages, m)
	}
	if len(open) > 0 {
		return nil, badRequest("messages", "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", ids(open))
	}
	return req, nil
}

func isNull(raw json.RawMessage) bool   { return len(raw) == 0 || string(raw) == "null" }
func isString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }
func isArray(raw json.RawMessage) bool  { return len(raw) > 0 && raw[0] == '[' }

func ids(set map[string]bool) string {
	var out []string
	for id := range set {
		out = append(out, id)
	}
	return strings.Join(out, ", ")
}

// -- the scripted model -------------------------------------------------------

type reply struct {
	turn         int // 1-based
	content      string
	calls        []toolCall
	finishReason string
	usage        Usage
}

func call(id, name, args string) toolCall {
	c := toolCall{ID: id, Type: "function"}
	c.Function.Name, c.Function.Arguments = name, args
	return c
}

func decide(req *chatRequest) (*reply, *apiError) {
	if last := req.Messages[len(req.Messages)-1]; last.Role != "user" && last.Role != "tool" {
		return nil, badRequest("messages", "the fake model answers a user or tool message last, got %s", last.Role)
	}
	for _, name := range []string{"read", "grep"} {
		if !req.ToolNames[name] {
			return nil, badRequest("tools", "the fake model needs a %q tool", name)
		}
	}
	switch len(req.ToolResultsOf) {
	case 0:
		return &reply{turn: 1, calls: []toolCall{call(ReadCallID, "read", ReadArgs)}, finishReason: "tool_calls", usage: Usages[0]}, nil
	case 1:
		if _, ok := req.ToolResultsOf[ReadCallID]; !ok {
			return nil, badRequest("messages", "the fake model expected the result of %s", ReadCallID)
		}
		return &reply{turn: 2, content: GrepNote, calls: []toolCall{call(GrepCallID, "grep", GrepArgs)}, finishReason: "tool_calls", usage: Usages[1]}, nil
	default:
		if _, ok := req.ToolResultsOf[GrepCallID]; !ok {
			return nil, badRequest("messages", "the fake model expected the result of %s", GrepCallID)
		}
		return &reply{turn: 3, content: Answer, finishReason: "stop", usage: Usages[2]}, nil
	}
}

// -- responses ------------------------------------------------------------------

const created = 1735689600

func (r *reply) id() string { return fmt.Sprintf("chatcmpl-fake%d", r.turn) }

func writeReply(w http.ResponseWriter, req *chatRequest, r *reply) {
	msg := map[string]interface{}{"role": "assistant", "content": nil, "refusal": nil, "annotations": []interface{}{}}
	if r.content != "" {
		msg["content"] = r.content
	}
	if len(r.calls) > 0 {
		msg["tool_calls"] = r.calls
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]interface{}{
		"id": r.id(), "object": "chat.completion", "created": created, "model": req.Model,
		"choices": []interface{}{map[string]interface{}{
			"index": 0, "message": msg, "logprobs": nil, "finish_reason": r.finishReason,
		}},
		"usage": r.usage, "service_tier": "default", "system_fingerprint": "fp_fake",
	})
}

// streamReply sends the reply as OpenAI streams it: a first delta with the
// role, the content in pieces, each tool call's id and name and then its
// arguments in pieces, an empty delta with the finish_reason and, with
// stream_options.include_usage, a last chunk with no choices and the usage.
func streamReply(w http.ResponseWriter, req *chatRequest, r *reply) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(choices []interface{}, usage interface{}) {
		chunk := map[string]interface{}{
			"id": r.id(), "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"service_tier": "default", "system_fingerprint": "fp_fake", "choices": choices,
		}
		if req.IncludeUsage {
			chunk["usage"] = usage
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	delta := func(d map[string]interface{}, finish interface{}) {
		send([]interface{}{map[string]interface{}{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}}, nil)
	}
	first := map[string]interface{}{"role": "assistant", "content": "", "refusal": nil}
	if r.content == "" {
		first["content"] = nil
	}
	delta(first, nil)
	for _, piece := range words(r.content) {
		delta(map[string]interface{}{"content": piece}, nil)
	}
	for i, c := range r.calls {
		delta(map[string]interface{}{"tool_calls": []interface{}{map[string]interface{}{
			"index": i, "id": c.ID, "type": "function",
			"function": map[string]interface{}{"name": c.Function.Name, "arguments": ""},
		}}}, nil)
		for _, piece := range pieces(c.Function.Arguments, 6) {
			delta(map[string]interface{}{"tool_calls": []interface{}{map[string]interface{}{
				"index": i, "function": map[string]interface{}{"arguments": piece},
			}}}, nil)
		}
	}
	delta(map[string]interface{}{}, r.finishReason)
	if req.IncludeUsage {
		send([]interface{}{}, r.usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// words splits s before each space, as tokens come.
func words(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out, s = append(out, s[:i+1]), s[i+1:]
	}
	return out
}

// pieces splits s into runs of at most n bytes, never inside a character.
func pieces(s string, n int) []string {
	var out []string
	for s != "" {
		i := n
		if i >= len(s) {
			i = len(s)
		} else {
			for i > 0 && !utf8.RuneStart(s[i]) {
				i--
			}
		}
		out, s = append(out, s[:i]), s[i:]
	}
	return out
}
