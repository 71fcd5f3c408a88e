package fakeopenai_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxwarden/ctxwarden/client/go/internal/fakeopenai"
)

const tools = `[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}},
	{"type":"function","function":{"name":"grep","parameters":{"type":"object"}}}]`

const afterRead = `[{"role":"user","content":"hi"},
	{"role":"assistant","content":null,"tool_calls":[{"id":"` + fakeopenai.ReadCallID + `","type":"function","function":{"name":"read","arguments":"{}"}}]},
	{"role":"tool","tool_call_id":"` + fakeopenai.ReadCallID + `","content":"x"}]`

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+fakeopenai.Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestStreamWireFormat: the streamed grep call comes as OpenAI sends it.
func TestStreamWireFormat(t *testing.T) {
	srv := httptest.NewServer(&fakeopenai.Provider{APIKey: "k"})
	defer srv.Close()
	resp, body := post(t, srv.URL, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"tools":`+tools+`,"messages":`+afterRead+`}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	events := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("last event %q, want data: [DONE]", events[len(events)-1])
	}
	var args []string
	var content, finish string
	var usageChunks int
	for _, e := range events[:len(events)-1] {
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Index    int     `json:"index"`
						ID       *string `json:"id"`
						Function struct {
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *fakeopenai.Usage `json:"usage"`
		}
		if !strings.HasPrefix(e, "data: ") || json.Unmarshal([]byte(e[len("data: "):]), &chunk) != nil || chunk.Object != "chat.completion.chunk" {
			t.Fatalf("bad event %q", e)
		}
		if chunk.Usage != nil {
			usageChunks++
			if len(chunk.Choices) != 0 || *chunk.Usage != fakeopenai.Usages[1] {
				t.Errorf("usage chunk %q", e)
			}
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != nil {
				content += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID == nil {
					args = append(args, tc.Function.Arguments)
				}
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if len(args) < 3 || strings.Join(args, "") != fakeopenai.GrepArgs {
		t.Errorf("arguments pieces %q, want several making %s", args, fakeopenai.GrepArgs)
	}
	if content != fakeopenai.GrepNote || finish != "tool_calls" || usageChunks != 1 {
		t.Errorf("content %q finish_reason %q usage chunks %d", content, finish, usageChunks)
	}
}

// TestRejects: requests the real API refuses get a 400 with an OpenAI error.
func TestRejects(t *testing.T) {
	srv := httptest.NewServer(&fakeopenai.Provider{APIKey: "k"})
	defer srv.Close()
	for _, tc := range []struct{ name, body, want string }{
		{"unknown parameter", `{"model":"m","foo":1,"tools":` + tools + `,"messages":[{"role":"user","content":"hi"}]}`, "Unrecognized request argument"},
		{"stream_options without stream", `{"model":"m","stream_options":{"include_usage":true},"tools":` + tools + `,"messages":[{"role":"user","content":"hi"}]}`, "only allowed when 'stream' is enabled"},
		{"tool message without a call", `{"model":"m","tools":` + tools + `,"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c","content":"x"}]}`, "must be a response to a preceeding message"},
		{"unanswered call", `{"model":"m","tools":` + tools + `,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"read","arguments":"{}"}}]},{"role":"user","content":"?"}]}`, "did not have response messages: c"},
		{"unknown message field", `{"model":"m","tools":` + tools + `,"messages":[{"role":"user","content":"hi","reasoning_content":"x"}]}`, "Unrecognized argument"},
		{"no model", `{"tools":` + tools + `,"messages":[{"role":"user","content":"hi"}]}`, "model parameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, srv.URL, tc.body)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if resp.StatusCode != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "invalid_request_error" ||
				!strings.Contains(e.Error.Message, tc.want) {
				t.Errorf("status %d body %s, want 400 with %q", resp.StatusCode, body, tc.want)
			}
		})
	}
}
