package ctxwarden_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// recordingClient records the BuildModelInput requests and raw answers that
// pass through it; with token set it replaces the request's resume_token.
type recordingClient struct {
	ctxwardenv1.ContextServiceClient
	mu       sync.Mutex
	token    *string
	requests []*ctxwardenv1.BuildModelInputRequest
	answers  []*ctxwardenv1.ModelInput
}

func (r *recordingClient) BuildModelInput(ctx context.Context, req *ctxwardenv1.BuildModelInputRequest,
	opts ...grpc.CallOption) (*ctxwardenv1.ModelInput, error) {
	r.mu.Lock()
	if r.token != nil {
		req.ResumeToken = *r.token
	}
	r.requests = append(r.requests, proto.Clone(req).(*ctxwardenv1.BuildModelInputRequest))
	r.mu.Unlock()
	in, err := r.ContextServiceClient.BuildModelInput(ctx, req, opts...)
	if err == nil {
		r.mu.Lock()
		r.answers = append(r.answers, proto.Clone(in).(*ctxwardenv1.ModelInput))
		r.mu.Unlock()
	}
	return in, err
}

func (r *recordingClient) last() (*ctxwardenv1.BuildModelInputRequest, *ctxwardenv1.ModelInput) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[len(r.requests)-1], r.answers[len(r.answers)-1]
}

// TestInputCacheEqualsFullInput builds inputs incrementally against a real
// server and compares each with a plain, complete BuildModelInput.
func TestInputCacheEqualsFullInput(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv.Target)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: &ctxwardenv1.Session{
		SystemPrompt: "Be brief.",
		Tools:        []*ctxwardenv1.ToolDefinition{{Name: "read", Description: "Read a file", ParametersJson: `{"type":"object"}`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	sid := s.GetSessionId()
	appendMsgs := func(msgs ...*ctxwardenv1.Message) {
		t.Helper()
		if _, err := c.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: sid, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	full := func() *ctxwardenv1.ModelInput {
		t.Helper()
		in, err := c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}

	rec := &recordingClient{ContextServiceClient: c}
	cache := ctxwarden.NewInputCache(0)
	build := func(step string) *ctxwardenv1.ModelInput {
		t.Helper()
		req := &ctxwardenv1.BuildModelInputRequest{SessionId: sid}
		in, err := cache.Build(ctx, rec, req)
		if err != nil {
			t.Fatalf("%s: Build: %v", step, err)
		}
		if req.GetResumeToken() != "" {
			t.Errorf("%s: Build changed the caller's request", step)
		}
		if want := full(); !proto.Equal(in, want) {
			t.Fatalf("%s: merged input differs from the full one:\n got %v\nwant %v", step, in, want)
		}
		return in
	}

	appendMsgs(ctxwarden.User("read two files"), ctxwarden.Assistant("ok", ctxwarden.ToolCall("a", "read", `{"path":"x"}`)))
	first := build("first")
	if req, raw := rec.last(); req.GetResumeToken() != "" || raw.GetMessagesOffset() != 0 || raw.GetResumeToken() == "" {
		t.Fatalf("first: sent token %q, got offset %d token %q; want no token, offset 0, a token",
			req.GetResumeToken(), raw.GetMessagesOffset(), raw.GetResumeToken())
	}
	if len(first.GetMessages()) == 0 {
		t.Fatal("first: no messages")
	}

	steps := [][]*ctxwardenv1.Message{
		{ctxwarden.ToolResult("a", "contents of x")},
		{ctxwarden.Assistant("and y", ctxwarden.ToolCall("b", "read", `{"path":"y"}`))},
		{ctxwarden.ToolResult("b", "contents of y"), ctxwarden.Assistant("done")},
		{ctxwarden.User("thanks")},
	}
	for i, msgs := range steps {
		appendMsgs(msgs...)
		step := fmt.Sprintf("step %d", i+1)
		in := build(step)
		req, raw := rec.last()
		if req.GetResumeToken() == "" {
			t.Errorf("%s: no resume_token sent", step)
		}
		if raw.GetMessagesOffset() <= 0 || len(raw.GetMessages()) >= len(in.GetMessages()) {
			t.Errorf("%s: answer had offset %d and %d of %d messages; want offset > 0 and fewer messages",
				step, raw.GetMessagesOffset(), len(raw.GetMessages()), len(in.GetMessages()))
		}
		if in.GetMessagesOffset() != 0 {
			t.Errorf("%s: merged input has messages_offset %d", step, in.GetMessagesOffset())
		}
	}

	// Nothing new: only the header travels.
	build("unchanged")
	if _, raw := rec.last(); len(raw.GetMessages()) != 0 || raw.GetMessagesOffset() == 0 {
		t.Errorf("unchanged: answer had offset %d and %d messages; want offset > 0, none",
			raw.GetMessagesOffset(), len(raw.GetMessages()))
	}

	// A garbage token is no error: the whole input comes back.
	garbage := "garbage-token"
	direct, err := c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid, ResumeToken: garbage})
	if err != nil {
		t.Fatalf("BuildModelInput with a garbage token: %v", err)
	}
	if direct.GetMessagesOffset() != 0 || !proto.Equal(direct, full()) {
		t.Errorf("garbage token: offset %d, equal to full %v; want a complete answer",
			direct.GetMessagesOffset(), proto.Equal(direct, full()))
	}
	rec.token = &garbage // the cache's token is replaced on the way
	appendMsgs(ctxwarden.Assistant("you're welcome"))
	build("garbage token")
	if req, raw := rec.last(); req.GetResumeToken() != garbage || raw.GetMessagesOffset() != 0 {
		t.Errorf("garbage token: sent %q, answer offset %d; want offset 0", req.GetResumeToken(), raw.GetMessagesOffset())
	}
	rec.token = nil
	appendMsgs(ctxwarden.User("one more"))
	build("after garbage")
	if _, raw := rec.last(); raw.GetMessagesOffset() <= 0 {
		t.Errorf("after garbage: answer offset %d, want > 0", raw.GetMessagesOffset())
	}
}

// offsetClient answers every BuildModelInput with messages_offset offset and
// one message, and records the resume_tokens it was sent.
type offsetClient struct {
	ctxwardenv1.ContextServiceClient
	offset int64
	tokens []string
}

func (f *offsetClient) BuildModelInput(_ context.Context, req *ctxwardenv1.BuildModelInputRequest,
	_ ...grpc.CallOption) (*ctxwardenv1.ModelInput, error) {
	f.tokens = append(f.tokens, req.GetResumeToken())
	return &ctxwardenv1.ModelInput{
		SessionId:      req.GetSessionId(),
		Messages:       []*ctxwardenv1.Message{ctxwarden.User("new")},
		ResumeToken:    "token-of-" + req.GetSessionId(),
		MessagesOffset: f.offset,
	}, nil
}

func TestInputCacheOffsetBeyondHeld(t *testing.T) {
	ctx := context.Background()
	var cache ctxwarden.InputCache // the zero value works
	f := &offsetClient{offset: 1}
	_, err := cache.Build(ctx, f, &ctxwardenv1.BuildModelInputRequest{SessionId: "s"})
	if err == nil || !strings.Contains(err.Error(), "held input has 0") {
		t.Fatalf("offset 1 with nothing held: err %v, want an error", err)
	}
	f.offset = 0
	if _, err := cache.Build(ctx, f, &ctxwardenv1.BuildModelInputRequest{SessionId: "s"}); err != nil {
		t.Fatal(err)
	}
	f.offset = 2 // one message held
	if _, err := cache.Build(ctx, f, &ctxwardenv1.BuildModelInputRequest{SessionId: "s"}); err == nil {
		t.Fatal("offset 2 with 1 message held: no error")
	}
	if cache.Len() != 0 {
		t.Errorf("after the error the session is still held (Len %d)", cache.Len())
	}
}

func TestInputCacheDropsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	cache := ctxwarden.NewInputCache(2)
	f := &offsetClient{}
	for _, sid := range []string{"a", "b", "a", "c", "a", "b"} {
		if _, err := cache.Build(ctx, f, &ctxwardenv1.BuildModelInputRequest{SessionId: sid}); err != nil {
			t.Fatal(err)
		}
	}
	// "b" was dropped when "c" came in ("a" had been used since), so its
	// second call sent no token.
	want := []string{"", "", "token-of-a", "", "token-of-a", ""}
	for i := range want {
		if f.tokens[i] != want[i] {
			t.Errorf("call %d sent %q, want %q (all: %q)", i, f.tokens[i], want[i], f.tokens)
		}
	}
	if cache.Len() != 2 {
		t.Errorf("Len = %d, want 2", cache.Len())
	}
}

// scriptedClient answers BuildModelInput with the queued answers, in order,
// and records the resume_tokens it was sent.
type scriptedClient struct {
	ctxwardenv1.ContextServiceClient
	answers []*ctxwardenv1.ModelInput
	tokens  []string
}

func (f *scriptedClient) BuildModelInput(_ context.Context, req *ctxwardenv1.BuildModelInputRequest,
	_ ...grpc.CallOption) (*ctxwardenv1.ModelInput, error) {
	f.tokens = append(f.tokens, req.GetResumeToken())
	in := f.answers[0]
	f.answers = f.answers[1:]
	return in, nil
}

func rendered(token string, prefix int, json string) *ctxwardenv1.ModelInput {
	return &ctxwardenv1.ModelInput{SessionId: "r", ResumeToken: token, RenderedPrefixBytes: int64(prefix), RenderedJson: json}
}

// TestInputCacheSplicesRenderedJSON: rendered_json resumed at a byte offset
// (UTF-8) of the held rendered_json, with multi-byte characters (2-byte é,
// 3-byte €, 4-byte emoji) before and at the cut.
func TestInputCacheSplicesRenderedJSON(t *testing.T) {
	ctx := context.Background()
	held := `{"messages":[{"role":"user","content":"héllo € 🙂"},{"role":"assistant","content":"ça va 👍"}`
	end := `],"tools":[]}`
	added := `,{"role":"user","content":"naïve → 🙃"}`
	cut := strings.Index(held, "👍") // a byte offset in Go
	third := held[:cut] + "😀\"}]}"
	f := &scriptedClient{answers: []*ctxwardenv1.ModelInput{
		rendered("t1", 0, held+end),
		rendered("t2", len(held), added+end), // resumes after the held messages
		rendered("t3", cut, "😀\"}]}"),        // resumes right before the emoji 👍
		rendered("t4", len(third), ""),       // nothing new: all of it is kept
	}}
	cache := ctxwarden.NewInputCache(0)
	req := &ctxwardenv1.BuildModelInputRequest{SessionId: "r", Format: ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT}
	for i, want := range []string{held + end, held + added + end, third, third} {
		in, err := cache.Build(ctx, f, req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if in.GetRenderedJson() != want || in.GetRenderedPrefixBytes() != 0 {
			t.Fatalf("call %d: rendered_json %q (prefix %d), want %q (prefix 0)", i, in.GetRenderedJson(), in.GetRenderedPrefixBytes(), want)
		}
	}
	if got := strings.Join(f.tokens, ","); got != ",t1,t2,t3" {
		t.Errorf("tokens sent %q, want %q", got, ",t1,t2,t3")
	}
}

// TestInputCacheRenderedPrefixBeyondHeld: an offset past the held
// rendered_json, inside a character, or with nothing held is an error that
// drops the held input.
func TestInputCacheRenderedPrefixBeyondHeld(t *testing.T) {
	ctx := context.Background()
	held := `{"system":"é"}` // 15 bytes
	for _, tc := range []struct {
		prefix int
		want   string
	}{
		{16, "the held rendered_json has 15 bytes"},
		{-1, "the held rendered_json has 15 bytes"},
		{12, "inside a UTF-8 character"}, // the second byte of é
	} {
		var cache ctxwarden.InputCache
		f := &scriptedClient{answers: []*ctxwardenv1.ModelInput{rendered("t1", 0, held), rendered("t2", tc.prefix, "}")}}
		req := &ctxwardenv1.BuildModelInputRequest{SessionId: "r"}
		if _, err := cache.Build(ctx, f, req); err != nil {
			t.Fatal(err)
		}
		_, err := cache.Build(ctx, f, req)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", tc.prefix)) {
			t.Errorf("prefix %d: err %v, want one saying %q", tc.prefix, err, tc.want)
		}
		if cache.Len() != 0 {
			t.Errorf("prefix %d: the held input was not dropped", tc.prefix)
		}
	}
	var cache ctxwarden.InputCache
	f := &scriptedClient{answers: []*ctxwardenv1.ModelInput{rendered("t", 3, "}")}}
	if _, err := cache.Build(ctx, f, &ctxwardenv1.BuildModelInputRequest{SessionId: "r"}); err == nil ||
		!strings.Contains(err.Error(), "no input is held") {
		t.Errorf("nothing held: err %v, want an error", err)
	}
}

// TestInputCacheRenderedAgentLoop runs an agent loop against a real server
// with a rendered format (view BASIC): append a message, Build through the
// cache, repeat. Every merged rendered_json must equal, byte for byte, a plain
// BuildModelInput without resume_token, and every answer after the first must
// be resumed (rendered_prefix_bytes > 0) and smaller than the whole.
func TestInputCacheRenderedAgentLoop(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv.Target)
	for _, format := range []ctxwardenv1.ModelInputFormat{
		ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
		ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT,
	} {
		format := format
		t.Run(format.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: &ctxwardenv1.Session{
				SystemPrompt: "Be brief.",
				Tools:        []*ctxwardenv1.ToolDefinition{{Name: "read", Description: "Read a file", ParametersJson: `{"type":"object"}`}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			sid := s.GetSessionId()
			steps := []*ctxwardenv1.Message{ctxwarden.User("read x and y, s'il te plaît 🙂")}
			for _, f := range []string{"x", "y", "z"} {
				steps = append(steps,
					ctxwarden.Assistant("reading "+f, ctxwarden.ToolCall("call-"+f, "read", `{"path":"`+f+`"}`)),
					ctxwarden.ToolResult("call-"+f, "contents of "+f+": naïve → €\n"),
				)
			}
			steps = append(steps, ctxwarden.Assistant("done 👍"), ctxwarden.User("merci"), ctxwarden.Assistant("de rien"))

			rec := &recordingClient{ContextServiceClient: c}
			cache := ctxwarden.NewInputCache(0)
			for i, m := range steps {
				if _, err := c.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: sid, Messages: []*ctxwardenv1.Message{m}}); err != nil {
					t.Fatal(err)
				}
				in, err := cache.Build(ctx, rec, &ctxwardenv1.BuildModelInputRequest{SessionId: sid, Format: format})
				if err != nil {
					t.Fatalf("step %d: Build: %v", i, err)
				}
				full, err := c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid, Format: format})
				if err != nil {
					t.Fatal(err)
				}
				if full.GetRenderedJson() == "" || in.GetRenderedJson() != full.GetRenderedJson() {
					t.Fatalf("step %d: merged rendered_json differs from the full one:\n got %s\nwant %s", i, in.GetRenderedJson(), full.GetRenderedJson())
				}
				a, b := proto.Clone(in).(*ctxwardenv1.ModelInput), proto.Clone(full).(*ctxwardenv1.ModelInput)
				a.ResumeToken, b.ResumeToken = "", "" // the tokens may differ
				if !proto.Equal(a, b) {
					t.Errorf("step %d: merged input differs from the full one:\n got %v\nwant %v", i, a, b)
				}
				req, raw := rec.last()
				if raw.GetResumeToken() == "" {
					t.Fatalf("step %d: the rendered input has no resume_token", i)
				}
				if i == 0 {
					if req.GetResumeToken() != "" || raw.GetRenderedPrefixBytes() != 0 {
						t.Errorf("first: sent token %q, got prefix %d; want none, 0", req.GetResumeToken(), raw.GetRenderedPrefixBytes())
					}
					continue
				}
				sent, whole := len(raw.GetRenderedJson()), len(full.GetRenderedJson())
				if req.GetResumeToken() == "" || raw.GetRenderedPrefixBytes() <= 0 || sent >= whole ||
					int64(whole-sent) != raw.GetRenderedPrefixBytes() {
					t.Errorf("step %d: sent token %q; answer has prefix %d and %d of %d bytes; want a token, prefix > 0, fewer bytes",
						i, req.GetResumeToken(), raw.GetRenderedPrefixBytes(), sent, whole)
				}
			}
		})
	}
}
