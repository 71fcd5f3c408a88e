package agentloop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/example/agentloop"
	"github.com/ctxwarden/ctxwarden/client/go/internal/fakeopenai"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const question = "What does setup.py do, and does it declare any dependencies?"

// TestToolLoop runs the example's tool loop (ctxwarden renders every request
// and reads every answer and tool result; the agent only moves JSON) against
// a real ctxwarden server and the fake Chat Completions endpoint: a plain call
// that asks for read, a streamed one that asks for grep (its arguments in
// pieces), then the answer. It checks every request the endpoint received
// against the conversation as OpenAI expects it, and the stored messages.
func TestToolLoop(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for _, tc := range []struct {
		name   string
		stream func(n int) bool
	}{
		{"first plain then streamed", func(n int) bool { return n >= 2 }},
		{"plain", nil},
		{"streamed", func(int) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			provider := &fakeopenai.Provider{APIKey: "sk-test"}
			api := httptest.NewServer(provider)
			defer api.Close()
			loop := &agentloop.ToolLoop{BaseURL: api.URL + "/v1", APIKey: "sk-test", Model: "gpt-4o", Stream: tc.stream}
			var out bytes.Buffer
			sid, answer, err := loop.Run(ctx, c, question, &out)
			t.Logf("output:\n%s", out.String())
			if err != nil {
				t.Fatalf("Run: %v (reason %q)", err, ctxwarden.ErrorReason(err))
			}
			streamed := func(n int) bool { return tc.stream != nil && tc.stream(n) }
			checkRequests(t, provider.Requests(), streamed)
			checkStored(t, ctx, c, sid, answer)
		})
	}
}

// The conversation as the Chat Completions API expects it.
var (
	toolsJSON = `[
		{"type":"function","function":{"name":"read","description":"Read a file of the project",
			"parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},
		{"type":"function","function":{"name":"grep","description":"List the lines of the project's files under path that contain pattern",
			"parameters":{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}}}]`
	systemJSON = `{"role":"system","content":` + q(agentloop.ToolLoopSystemPrompt) + `}`
	userJSON   = `{"role":"user","content":` + q(question) + `}`
	readJSON   = `{"role":"assistant","content":null,"tool_calls":[
		{"id":"call_Y2pR8aQ1vK7mT3sN9wE4bH6c","type":"function","function":{"name":"read","arguments":"{\"path\":\"setup.py\"}"}}]}`
	readResultJSON = `{"role":"tool","tool_call_id":"call_Y2pR8aQ1vK7mT3sN9wE4bH6c","content":` +
		q(agentloop.RunTool("read", `{"path":"setup.py"}`)) + `}`
	grepJSON = `{"role":"assistant","content":"setup.py has no install_requires. Let me search the project for other requirements.",
		"tool_calls":[{"id":"call_L5dJ0xF7uC2gZ8qA4rV1nM9k","type":"function",
			"function":{"name":"grep","arguments":"{\"pattern\":\"requires\",\"path\":\".\"}"}}]}`
	grepResultJSON = `{"role":"tool","tool_call_id":"call_L5dJ0xF7uC2gZ8qA4rV1nM9k","content":"setup.py:19:    python_requires=\">=3.9\","}`
)

func q(s string) string { return strconv.Quote(s) } // JSON-safe for these ASCII texts

func checkRequests(t *testing.T, got []fakeopenai.Request, streamed func(int) bool) {
	t.Helper()
	conversations := [][]string{
		{systemJSON, userJSON},
		{systemJSON, userJSON, readJSON, readResultJSON},
		{systemJSON, userJSON, readJSON, readResultJSON, grepJSON, grepResultJSON},
	}
	if len(got) != len(conversations) {
		t.Fatalf("the provider got %d requests, want %d", len(got), len(conversations))
	}
	for i, messages := range conversations {
		n := i + 1
		want := `{"model":"gpt-4o","stream":` + strconv.FormatBool(streamed(n))
		if streamed(n) {
			want += `,"stream_options":{"include_usage":true}`
		}
		want += `,"messages":[` + strings.Join(messages, ",") + `],"tools":` + toolsJSON + `}`
		if !jsonEqual(t, got[i].Body, []byte(want)) {
			t.Errorf("request %d:\n got %s\nwant %s", n, indent(got[i].Body), indent([]byte(want)))
		}
		if h := got[i].Header; h.Get("Authorization") != "Bearer sk-test" || h.Get("Content-Type") != "application/json" {
			t.Errorf("request %d headers: %v", n, h)
		}
	}
}

func checkStored(t *testing.T, ctx context.Context, c ctxwardenv1.ContextServiceClient, sid string, answer *ctxwardenv1.Message) {
	t.Helper()
	lm, err := c.ListMessages(ctx, &ctxwardenv1.ListMessagesRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	msgs := lm.GetMessages()
	if len(msgs) != 6 {
		t.Fatalf("stored %d messages, want 6", len(msgs))
	}
	type usage struct{ in, cacheRead, out, total int64 }
	for i, w := range []struct {
		role  ctxwardenv1.Role
		stop  ctxwardenv1.StopReason
		usage usage
		text  string
		call  string // id name args
		tcID  string
	}{
		{role: ctxwardenv1.Role_ROLE_USER, text: question},
		{role: ctxwardenv1.Role_ROLE_ASSISTANT, stop: ctxwardenv1.StopReason_STOP_REASON_TOOL_USE, usage: usage{187, 0, 18, 205},
			call: fakeopenai.ReadCallID + " read " + fakeopenai.ReadArgs},
		{role: ctxwardenv1.Role_ROLE_TOOL_RESULT, tcID: fakeopenai.ReadCallID, text: agentloop.RunTool("read", fakeopenai.ReadArgs)},
		{role: ctxwardenv1.Role_ROLE_ASSISTANT, stop: ctxwardenv1.StopReason_STOP_REASON_TOOL_USE, usage: usage{702, 0, 41, 743},
			text: fakeopenai.GrepNote, call: fakeopenai.GrepCallID + " grep " + fakeopenai.GrepArgs},
		{role: ctxwardenv1.Role_ROLE_TOOL_RESULT, tcID: fakeopenai.GrepCallID, text: `setup.py:19:    python_requires=">=3.9",`},
		{role: ctxwardenv1.Role_ROLE_ASSISTANT, stop: ctxwardenv1.StopReason_STOP_REASON_STOP, usage: usage{835 - 640, 640, 47, 882},
			text: fakeopenai.Answer},
	} {
		m := msgs[i]
		var text, call []string
		for _, b := range m.GetContent() {
			if x := b.GetText(); x != nil {
				text = append(text, x.GetText())
			} else if tc := b.GetToolCall(); tc != nil {
				call = append(call, tc.GetId()+" "+tc.GetName()+" "+tc.GetArgumentsJson())
			} else {
				t.Errorf("message %d: unexpected block %v", i+1, b)
			}
		}
		u := m.GetUsage()
		gotUsage := usage{u.GetInputTokens(), u.GetCacheReadTokens(), u.GetOutputTokens(), u.GetTotalTokens()}
		if m.GetRole() != w.role || m.GetStopReason() != w.stop || gotUsage != w.usage ||
			strings.Join(text, "|") != w.text || strings.Join(call, "|") != w.call || m.GetToolCallId() != w.tcID {
			t.Errorf("stored message %d:\n%s\nwant role=%s stop_reason=%s usage=%+v text=%q call=%q tool_call_id=%q",
				i+1, protojson.Format(m), w.role, w.stop, w.usage, w.text, w.call, w.tcID)
		}
		if m.GetRole() == ctxwardenv1.Role_ROLE_ASSISTANT && (m.GetModel() != "gpt-4o" || m.GetProvider() != "openai") {
			t.Errorf("stored message %d: model=%q provider=%q, want gpt-4o/openai", i+1, m.GetModel(), m.GetProvider())
		}
	}
	if !proto.Equal(answer, msgs[5]) {
		t.Errorf("Run's answer is not the stored message:\n%s\nstored\n%s", protojson.Format(answer), protojson.Format(msgs[5]))
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb interface{}
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON: %v: %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("expected value is not JSON: %v: %s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

func indent(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return string(b)
	}
	return out.String()
}

// TestToolLoopMovesJSONOnly checks that the tool loop (toolloop.go) converts
// nothing by hand: it builds no ctxwarden messages, parses no provider JSON,
// names none of the provider's response fields and reads no event stream
// itself. It only moves JSON between BuildModelInput, the provider and
// AppendModelOutput (and writes its tool results as Chat tool messages).
func TestToolLoopMovesJSONOnly(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "toolloop.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	allowedImports := map[string]bool{
		"bytes": true, "context": true, "encoding/json": true, "fmt": true, "io": true, "net/http": true,
		"github.com/ctxwarden/ctxwarden/client/go/ctxwarden":   true,
		"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1": true,
	}
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); !allowedImports[path] {
			t.Errorf("toolloop.go imports %s", path)
		}
	}
	forbiddenCalls := map[string]bool{
		"json.Unmarshal": true, "json.NewDecoder": true, "json.Valid": true,
		"ctxwarden.User": true, "ctxwarden.Assistant": true, "ctxwarden.ToolCall": true,
		"ctxwarden.ToolResult": true, "ctxwarden.FailedAssistant": true,
	}
	forbiddenText := []string{
		"choices", "delta", "finish_reason", "tool_calls", "prompt_tokens", "completion_tokens",
		"arguments", "chat.completion", "data:", "[DONE]", "event-stream",
	}
	used := map[string]bool{}
	tags := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				tags[n.Tag] = true
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok {
				name := x.Name + "." + n.Sel.Name
				used[name] = true
				if forbiddenCalls[name] {
					t.Errorf("%s: toolloop.go uses %s", fset.Position(n.Pos()), name)
				}
			}
			if n.Sel.Name == "AppendMessages" {
				t.Errorf("%s: toolloop.go calls AppendMessages", fset.Position(n.Pos()))
			}
		case *ast.CompositeLit:
			if sel, ok := n.Type.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "ctxwardenv1" &&
					!strings.HasSuffix(sel.Sel.Name, "Request") && sel.Sel.Name != "Session" {
					t.Errorf("%s: toolloop.go builds a ctxwardenv1.%s", fset.Position(n.Pos()), sel.Sel.Name)
				}
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && !tags[n] {
				s, _ := strconv.Unquote(n.Value)
				for _, word := range forbiddenText {
					if strings.Contains(s, word) {
						t.Errorf("%s: toolloop.go names %q", fset.Position(n.Pos()), word)
					}
				}
			}
		}
		return true
	})
	for _, name := range []string{"ctxwarden.NewInputCache", "inputs.Build", "c.AppendModelOutput", "ctxwarden.ModelOutput",
		"ctxwarden.ModelItems", "ctxwarden.RequestBody", "ctxwarden.ReadResponse"} {
		if !used[name] {
			t.Errorf("toolloop.go does not use %s", name)
		}
	}
}
