package ctxwarden_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
)

func TestReadSSE(t *testing.T) {
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"openai chat", "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n", `[{"a":1},{"b":2}]`},
		{"nothing after [DONE] is read", "data: {\"a\":1}\n\ndata: [DONE]\n\ndata: not json\n\n", `[{"a":1}]`},
		{"event and id fields, comments", ": keep-alive\n\nevent: message_start\nid: 7\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n", `[{"type":"message_start"},{"type":"ping"}]`},
		{"CRLF and CR line ends", "data: {\"a\":1}\r\n\r\ndata: {\"b\":2}\r\rdata:{\"c\":3}\n\n", `[{"a":1},{"b":2},{"c":3}]`},
		{"data lines of one event are joined", "data: {\"a\":\ndata: 1}\n\n", "[{\"a\":\n1}]"},
		{"byte order mark", "\xef\xbb\xbfdata: {}\n\n", `[{}]`},
		{"unfinished last event dropped", "data: {\"a\":1}\n\ndata: {\"b\":", `[{"a":1}]`},
		{"empty", "", `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ctxwarden.ReadSSE(iotest.OneByteReader(strings.NewReader(tc.stream)))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("ReadSSE = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestReadSSEErrors(t *testing.T) {
	if _, err := ctxwarden.ReadSSE(strings.NewReader("data: {\"a\":1}\n\ndata: nope\n\n")); err == nil ||
		!strings.Contains(err.Error(), "event 1") {
		t.Errorf("invalid payload: err = %v, want an error naming event 1", err)
	}
	broken := io.MultiReader(strings.NewReader("data: {\"a\":1}\n\ndata: {\"b\""), iotest.ErrReader(io.ErrUnexpectedEOF))
	got, err := ctxwarden.ReadSSE(broken)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("broken stream: err = %v, want io.ErrUnexpectedEOF", err)
	}
	if string(got) != `[{"a":1}]` {
		t.Errorf("broken stream: payloads so far = %s, want [{\"a\":1}]", got)
	}
}

func TestReadResponse(t *testing.T) {
	resp := func(contentType, body string) *http.Response {
		return &http.Response{Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(strings.NewReader(body))}
	}
	got, err := ctxwarden.ReadResponse(resp("text/event-stream; charset=utf-8", "data: {\"x\":1}\n\ndata: [DONE]\n\n"))
	if err != nil || string(got) != `[{"x":1}]` {
		t.Errorf("event stream: %s, %v", got, err)
	}
	got, err = ctxwarden.ReadResponse(resp("application/json", `{"object":"chat.completion"}`))
	if err != nil || string(got) != `{"object":"chat.completion"}` {
		t.Errorf("JSON body: %s, %v", got, err)
	}
}

func TestRequestBody(t *testing.T) {
	in := &ctxwardenv1.ModelInput{RenderedJson: `{"messages":[{"role":"user","content":"<b> & é"}],"tools":[]}`}
	got, err := ctxwarden.RequestBody(in, map[string]interface{}{"stream": true, "model": "gpt-4o", "stop": []string{"<end>"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messages":[{"role":"user","content":"<b> & é"}],"tools":[],"model":"gpt-4o","stop":["<end>"],"stream":true}`
	if string(got) != want {
		t.Errorf("RequestBody =\n%s\nwant\n%s", got, want)
	}
	if got, err := ctxwarden.RequestBody(&ctxwardenv1.ModelInput{RenderedJson: " {} "}, map[string]interface{}{"model": "m"}); err != nil || string(got) != `{"model":"m"}` {
		t.Errorf("empty object: %s, %v", got, err)
	}
	if _, err := ctxwarden.RequestBody(in, map[string]interface{}{"tools": nil}); err == nil {
		t.Error("a parameter overriding a rendered member: no error")
	}
	if _, err := ctxwarden.RequestBody(&ctxwardenv1.ModelInput{}, nil); err == nil {
		t.Error("no rendered_json: no error")
	}
	if _, err := ctxwarden.RequestBody(&ctxwardenv1.ModelInput{RenderedJson: "[]"}, nil); err == nil {
		t.Error("rendered_json not an object: no error")
	}
}

// TestModelOutputBuilders appends a Chat Completions answer and a tool
// result through the request builders.
func TestModelOutputBuilders(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: &ctxwardenv1.Session{}})
	if err != nil {
		t.Fatal(err)
	}
	chat := ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT
	if _, err := c.AppendModelOutput(ctx, ctxwarden.ModelItems(s.GetSessionId(), chat, []byte(`[{"role":"user","content":"hi"}]`))); err != nil {
		t.Fatal(err)
	}
	stream := "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n" +
		"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"x\\\"\"}}]}}]}\n\n" +
		"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n" +
		"data: [DONE]\n\n"
	payloads, err := ctxwarden.ReadSSE(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.AppendModelOutput(ctx, ctxwarden.ModelOutput(s.GetSessionId(), chat, payloads))
	if err != nil {
		t.Fatal(err)
	}
	m := resp.GetMessages()[0]
	call := m.GetContent()[0].GetToolCall()
	if m.GetStopReason() != ctxwardenv1.StopReason_STOP_REASON_TOOL_USE || call.GetId() != "call_1" || call.GetArgumentsJson() != `{"x":1}` {
		t.Errorf("stored answer: stop_reason=%s call=%v", m.GetStopReason(), call)
	}
	resp, err = c.AppendModelOutput(ctx, ctxwarden.ModelItems(s.GetSessionId(), chat, []byte(`[{"role":"tool","tool_call_id":"call_1","content":"42"}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetMessages()[0]; r.GetRole() != ctxwardenv1.Role_ROLE_TOOL_RESULT || r.GetToolCallId() != "call_1" ||
		r.GetContent()[0].GetText().GetText() != "42" {
		t.Errorf("stored tool result: %v", r)
	}
}
