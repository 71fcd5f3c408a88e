package ctxwarden_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestErrorReasonNotFound asks a real server for a session that does not exist.
func TestErrorReasonNotFound(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	_, err = c.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: "no-such-session"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("GetSession: %v, want NOT_FOUND", err)
	}
	if got := ctxwarden.ErrorReason(err); got != "SESSION_NOT_FOUND" {
		t.Errorf("ErrorReason = %q, want SESSION_NOT_FOUND (err %v)", got, err)
	}
	if got := ctxwarden.ErrorReason(fmt.Errorf("loading session: %w", err)); got != "SESSION_NOT_FOUND" {
		t.Errorf("ErrorReason(wrapped) = %q, want SESSION_NOT_FOUND", got)
	}
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() != ctxwarden.ErrorDomain {
			t.Errorf("ErrorInfo.domain = %q, want %q", info.GetDomain(), ctxwarden.ErrorDomain)
		}
	}
}

func TestErrorReasonWithoutErrorInfo(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("plain"),
		status.Error(codes.DeadlineExceeded, "no details"),
	} {
		if got := ctxwarden.ErrorReason(err); got != "" {
			t.Errorf("ErrorReason(%v) = %q, want \"\"", err, got)
		}
	}
}

func TestToolCalls(t *testing.T) {
	read := ctxwarden.ToolCall("c1", "read", `{"path":"a"}`)
	grep := ctxwarden.ToolCall("c2", "grep", `{"pattern":"x"}`)
	m := ctxwarden.Assistant("Let me look.", read, grep)
	m.Content = append(m.Content, &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Text{
		Text: &ctxwardenv1.TextContent{Text: "after"}}})
	got := ctxwarden.ToolCalls(m)
	if len(got) != 2 || got[0] != read || got[1] != grep {
		t.Errorf("ToolCalls = %v, want [c1 c2] (the message's own calls, in order)", got)
	}
	for _, m := range []*ctxwardenv1.Message{nil, ctxwarden.User("hi"), ctxwarden.Assistant("done"), ctxwarden.FailedAssistant("429")} {
		if got := ctxwarden.ToolCalls(m); got != nil {
			t.Errorf("ToolCalls(%v) = %v, want nil", m, got)
		}
	}
}

// TestToolCallsOfStoredAnswer reads the calls of a model answer as the server
// stored it (OpenAI Chat format, two calls).
func TestToolCallsOfStoredAnswer(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv.Target)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	chat := ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT
	if _, err := c.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: s.GetSessionId(),
		Messages: []*ctxwardenv1.Message{ctxwarden.User("read a and b")}}); err != nil {
		t.Fatal(err)
	}
	response := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"call_a","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"read","arguments":"{\"path\":\"b\"}"}}]},` +
		`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`
	stored, err := c.AppendModelOutput(ctx, ctxwarden.ModelOutput(s.GetSessionId(), chat, []byte(response)))
	if err != nil {
		t.Fatal(err)
	}
	calls := ctxwarden.ToolCalls(stored.GetMessages()[0])
	var got []string
	for _, call := range calls {
		got = append(got, call.GetId()+" "+call.GetName()+" "+call.GetArgumentsJson())
	}
	want := []string{`call_a read {"path":"a"}`, `call_b read {"path":"b"}`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ToolCalls(stored answer) = %q, want %q", got, want)
	}
}

func TestMessageBuilders(t *testing.T) {
	u := ctxwarden.User("hi")
	if u.GetRole() != ctxwardenv1.Role_ROLE_USER || u.GetContent()[0].GetText().GetText() != "hi" {
		t.Errorf("User: %v", u)
	}
	a := ctxwarden.Assistant("", ctxwarden.ToolCall("c1", "read", `{"path":"a"}`), ctxwarden.ToolCall("c2", "read", ""))
	if a.GetStopReason() != ctxwardenv1.StopReason_STOP_REASON_TOOL_USE || len(a.GetContent()) != 2 ||
		a.GetContent()[0].GetToolCall().GetId() != "c1" || a.GetContent()[1].GetToolCall().GetName() != "read" {
		t.Errorf("Assistant with calls: %v", a)
	}
	if s := ctxwarden.Assistant("done"); s.GetStopReason() != ctxwardenv1.StopReason_STOP_REASON_STOP || len(s.GetContent()) != 1 {
		t.Errorf("Assistant: %v", s)
	}
	r := ctxwarden.ToolResult("c1", "out")
	if r.GetRole() != ctxwardenv1.Role_ROLE_TOOL_RESULT || r.GetToolCallId() != "c1" || r.GetContent()[0].GetText().GetText() != "out" {
		t.Errorf("ToolResult: %v", r)
	}
	f := ctxwarden.FailedAssistant("429")
	if f.GetStopReason() != ctxwardenv1.StopReason_STOP_REASON_ERROR || f.GetErrorMessage() != "429" || len(f.GetContent()) != 0 {
		t.Errorf("FailedAssistant: %v", f)
	}
}

// fakeServer answers GetSession: UNAVAILABLE for the first failFirst calls,
// then the session (or, for session "rich", NOT_FOUND with an ErrorInfo). It
// records the deadline each call arrived with.
type fakeServer struct {
	ctxwardenv1.UnimplementedContextServiceServer
	mu        sync.Mutex
	failFirst int
	calls     int
	remaining []time.Duration // -1: no deadline
}

func (f *fakeServer) GetSession(ctx context.Context, req *ctxwardenv1.GetSessionRequest) (*ctxwardenv1.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if dl, ok := ctx.Deadline(); ok {
		f.remaining = append(f.remaining, time.Until(dl))
	} else {
		f.remaining = append(f.remaining, -1)
	}
	if f.calls <= f.failFirst {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	if req.GetSessionId() == "rich" {
		st, err := status.New(codes.NotFound, "gone").WithDetails(
			&errdetails.ErrorInfo{Reason: "SESSION_NOT_FOUND", Domain: ctxwarden.ErrorDomain})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return &ctxwardenv1.Session{SessionId: req.GetSessionId()}, nil
}

func (f *fakeServer) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func startFake(t *testing.T, f *fakeServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	ctxwardenv1.RegisterContextServiceServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, target string, opts ...ctxwarden.Option) *ctxwarden.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, target, append([]ctxwarden.Option{ctxwarden.WithBlock()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestErrorReasonFromStatusDetails(t *testing.T) {
	c := dial(t, startFake(t, &fakeServer{}))
	_, err := c.GetSession(context.Background(), &ctxwardenv1.GetSessionRequest{SessionId: "rich"})
	if got := ctxwarden.ErrorReason(err); got != "SESSION_NOT_FOUND" {
		t.Errorf("ErrorReason = %q (err %v)", got, err)
	}
}

func TestDefaultDeadline(t *testing.T) {
	f := &fakeServer{}
	target := startFake(t, f)
	req := &ctxwardenv1.GetSessionRequest{SessionId: "s"}

	if _, err := dial(t, target).GetSession(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, target, ctxwarden.WithTimeout(5*time.Second)).GetSession(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := dial(t, target).GetSession(ctx, req); err != nil { // the caller's deadline wins
		t.Fatal(err)
	}
	if _, err := dial(t, target, ctxwarden.WithTimeout(0)).GetSession(context.Background(), req); err != nil {
		t.Fatal(err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	within := func(i int, lo, hi time.Duration) {
		if got := f.remaining[i]; got < lo || got > hi {
			t.Errorf("call %d arrived with %v left, want %v..%v", i, got, lo, hi)
		}
	}
	within(0, ctxwarden.DefaultTimeout-5*time.Second, ctxwarden.DefaultTimeout)
	within(1, 0, 5*time.Second)
	within(2, 2*time.Minute-10*time.Second, 2*time.Minute)
	if f.remaining[3] != -1 {
		t.Errorf("WithTimeout(0): call arrived with a deadline (%v left)", f.remaining[3])
	}
}

func TestRetryUnavailable(t *testing.T) {
	f := &fakeServer{failFirst: 2}
	c := dial(t, startFake(t, f))
	s, err := c.GetSession(context.Background(), &ctxwardenv1.GetSessionRequest{SessionId: "s"})
	if err != nil || s.GetSessionId() != "s" {
		t.Fatalf("GetSession after 2 UNAVAILABLE: %v, %v", s, err)
	}
	if n := f.attempts(); n != 3 {
		t.Errorf("server saw %d attempts, want 3", n)
	}

	// Without the service config nothing is retried.
	f2 := &fakeServer{failFirst: 1}
	c2 := dial(t, startFake(t, f2), ctxwarden.WithServiceConfig(""))
	if _, err := c2.GetSession(context.Background(), &ctxwardenv1.GetSessionRequest{SessionId: "s"}); status.Code(err) != codes.Unavailable {
		t.Errorf("no retry policy: err %v, want UNAVAILABLE", err)
	}
	if n := f2.attempts(); n != 1 {
		t.Errorf("no retry policy: server saw %d attempts, want 1", n)
	}
}

// TestDialBlockGivesUpWithCtx dials a port nobody listens on: WithBlock keeps
// trying until ctx is done, then Dial fails with ctx's error; without it Dial
// returns at once and the call fails UNAVAILABLE (after the retries).
func TestDialBlockGivesUpWithCtx(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := lis.Addr().String()
	lis.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if c, err := ctxwarden.Dial(ctx, target, ctxwarden.WithBlock()); err == nil {
		c.Close()
		t.Fatal("Dial(WithBlock) to a closed port succeeded")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial(WithBlock) to a closed port: %v, want context.DeadlineExceeded", err)
	}

	c, err := ctxwarden.Dial(context.Background(), target)
	if err != nil {
		t.Fatalf("Dial without WithBlock: %v", err)
	}
	defer c.Close()
	if _, err := c.GetSession(context.Background(), &ctxwardenv1.GetSessionRequest{SessionId: "s"}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetSession on a closed port: %v, want UNAVAILABLE", err)
	}
}
