package adk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/adk"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"
)

// TestApplyContext: ApplyContext on hand-made events (the Python adapter's
// cases): what is not an event's stays where ADK put it; a prefix without a
// compaction (a memory block) goes before the first event's content; nothing
// is added when ADK sends none of the history; a kept content equal to a
// compacted one stays.
func TestApplyContext(t *testing.T) {
	said := func(role, text string) *genai.Content { return genai.NewContentFromText(text, genai.Role(role)) }
	var events []*session.Event
	var contents []*genai.Content
	for i, s := range [][2]string{{"user", "hi"}, {"model", "hello"}, {"user", "hi"}, {"model", "bye"}} {
		author := "clerk"
		if s[0] == "user" {
			author = "user"
		}
		events = append(events, &session.Event{ID: string(rune('a' + i)), Author: author,
			LLMResponse: model.LLMResponse{Content: said(s[0], s[1])}})
		contents = append(contents, said(s[0], s[1]))
	}
	added := said("user", "an instruction ADK inserts")
	prefix := []*genai.Content{said("user", "<summary>")}
	kept := func(from int) map[string]bool {
		m := map[string]bool{}
		for _, e := range events[from:] {
			m[e.ID] = true
		}
		return m
	}
	compacted := &adk.EffectiveContext{Prefix: prefix, Compacted: true, Kept: kept(2)}
	memory := &adk.EffectiveContext{Prefix: prefix, Kept: kept(0)}
	cat := func(lists ...[]*genai.Content) []*genai.Content {
		var out []*genai.Content
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	one := func(c *genai.Content) []*genai.Content { return []*genai.Content{c} }
	for _, tc := range []struct {
		name     string
		contents []*genai.Content
		context  *adk.EffectiveContext
		want     []*genai.Content
	}{
		{"compacted", cat(one(added), contents), compacted, cat(one(added), prefix, contents[2:])},
		{"only kept contents sent", contents[2:], compacted, contents[2:]},
		{"memory block", cat(contents[:3], one(added), contents[3:]), memory, cat(prefix, contents[:3], one(added), contents[3:])},
		{"first event not sent", contents[1:], memory, contents[1:]},
	} {
		if got := adk.ApplyContext(tc.contents, events, tc.context); jsonOf(t, got) != jsonOf(t, tc.want) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, jsonOf(t, got), jsonOf(t, tc.want))
		}
	}

	// A changed tool output, by its position among the event's responses.
	a, b := genai.NewPartFromFunctionResponse("f", map[string]any{"x": 1}), genai.NewPartFromFunctionResponse("f", map[string]any{"x": 2})
	answers := &session.Event{ID: "r", LLMResponse: model.LLMResponse{Content: genai.NewContentFromParts([]*genai.Part{a, b}, genai.RoleUser)}}
	stubbed := &adk.EffectiveContext{Kept: map[string]bool{"r": true}, Outputs: map[string]map[int]string{"r": {1: "[stub]"}}}
	got := adk.ApplyContext([]*genai.Content{answers.Content}, []*session.Event{answers}, stubbed)
	if got[0].Parts[0].FunctionResponse.Response["x"] != 1 || got[0].Parts[1].FunctionResponse.Response["result"] != "[stub]" ||
		answers.Content.Parts[1].FunctionResponse.Response["x"] != 2 {
		t.Errorf("a stubbed output: %s (the event's %s)", jsonOf(t, got), jsonOf(t, answers.Content))
	}
}

// TestNewEffectiveContext: prefix, kept events and changed outputs of a model input.
func TestNewEffectiveContext(t *testing.T) {
	user, _ := adk.EventToMessages(&session.Event{ID: "u", Author: "user",
		LLMResponse: model.LLMResponse{Content: genai.NewContentFromText("hi", genai.RoleUser)}})
	var parts []*genai.Part
	for _, id := range []string{"c1", "c2"} {
		p := genai.NewPartFromFunctionResponse("f", map[string]any{"id": id})
		p.FunctionResponse.ID = id
		parts = append(parts, p)
	}
	results, _ := adk.EventToMessages(&session.Event{ID: "r", Author: "clerk",
		LLMResponse: model.LLMResponse{Content: genai.NewContentFromParts(parts, genai.RoleUser)}})
	results[1].Seq = 7
	summary := &ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_USER, Content: []*ctxwardenv1.ContentBlock{tb("<summary>")}}
	synthetic := &ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_TOOL_RESULT, ToolCallId: "c9", Content: []*ctxwardenv1.ContentBlock{tb("none")}}
	results[1].Content = []*ctxwardenv1.ContentBlock{tb("[stub]")}
	c := adk.NewEffectiveContext(&ctxwardenv1.ModelInput{
		CompactionId: "k1",
		Messages:     []*ctxwardenv1.Message{summary, user[0], results[0], results[1], synthetic},
		Notices:      []*ctxwardenv1.Notice{{Code: "TOOL_OUTPUT_STUBBED", Seq: 7}},
	})
	if len(c.Prefix) != 1 || c.Prefix[0].Parts[0].Text != "<summary>" || c.Prefix[0].Role != genai.RoleUser || !c.Compacted ||
		len(c.Kept) != 2 || !c.Kept["u"] || !c.Kept["r"] || c.Outputs["r"][1] != "[stub]" || len(c.Outputs["r"]) != 1 {
		t.Errorf("%+v", c)
	}
}

// TestStaleSession: an append to a session object read before another
// writer's append fails with ErrStaleSession and stores nothing; the object
// read again appends; a retried append is stored once; a reused event ID is
// refused.
func TestStaleSession(t *testing.T) {
	client := dial(t, server(t))
	ctx := t.Context()
	service, err := adk.NewSessionService(client, adk.WithNamespace("stale-"+token(t)))
	if err != nil {
		t.Fatal(err)
	}
	get := &session.GetRequest{AppName: app, UserID: user, SessionID: "s"}
	if _, err := service.Create(ctx, &session.CreateRequest{AppName: app, UserID: user, SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	first, _ := service.Get(ctx, get)
	second, _ := service.Get(ctx, get)
	ev := func(id string) *session.Event {
		return &session.Event{ID: id, Author: "user", Timestamp: time.Now(),
			LLMResponse: model.LLMResponse{Content: genai.NewContentFromText(id, genai.RoleUser)}}
	}
	if err := service.AppendEvent(ctx, first.Session, ev("one")); err != nil {
		t.Fatal(err)
	}
	if err := service.AppendEvent(ctx, second.Session, ev("two")); !errors.Is(err, adk.ErrStaleSession) {
		t.Fatalf("append to a stale session: %v, want ErrStaleSession", err)
	}
	again, _ := service.Get(ctx, get)
	if err := service.AppendEvent(ctx, again.Session, ev("three")); err != nil {
		t.Fatal(err)
	}
	stored, _ := service.Get(ctx, get)
	var ids []string
	for e := range stored.Session.Events().All() {
		ids = append(ids, e.ID)
	}
	if jsonOf(t, ids) != `["one","three"]` || again.Session.Events().Len() != 2 {
		t.Errorf("stored events %v", ids)
	}
	// A retried append (the same event on the same revision, as after a lost
	// answer) is answered from the request log: stored once.
	retryA, _ := service.Get(ctx, get)
	retryB, _ := service.Get(ctx, get)
	retried := ev("retried")
	for _, s := range []session.Session{retryA.Session, retryB.Session} {
		if err := service.AppendEvent(ctx, s, retried); err != nil {
			t.Fatalf("append (retried): %v", err)
		}
	}
	if got, _ := service.Get(ctx, get); got.Session.Events().Len() != 3 {
		t.Errorf("%d events after a retried append, want 3", got.Session.Events().Len())
	}
	// An event ID is the append's request_id: another event with a used ID is refused.
	if err := service.AppendEvent(ctx, retryA.Session, ev("one")); ctxwarden.ErrorReason(err) != "REQUEST_ID_REUSED" {
		t.Errorf("append of another event with a used ID: %v, want REQUEST_ID_REUSED", err)
	}
	if err := service.AppendEvent(ctx, &foreignSession{id: "missing"}, ev("four")); !errors.Is(err, adk.ErrSessionNotFound) {
		t.Errorf("append to a missing session: %v, want ErrSessionNotFound", err)
	}
	if err := service.AppendEvent(ctx, &foreignSession{id: "s", updated: time.Now().Add(-time.Hour)}, ev("five")); !errors.Is(err, adk.ErrStaleSession) {
		t.Errorf("append with a session object older than storage: %v, want ErrStaleSession", err)
	}
	if err := service.AppendEvent(ctx, &foreignSession{id: "s", updated: time.Now()}, ev("six")); err != nil {
		t.Errorf("append with a current session object of another type: %v", err)
	}
}

type foreignSession struct {
	id      string
	updated time.Time
}

func (f *foreignSession) ID() string                { return f.id }
func (f *foreignSession) AppName() string           { return app }
func (f *foreignSession) UserID() string            { return user }
func (f *foreignSession) State() session.State      { return nil }
func (f *foreignSession) Events() session.Events    { return nil }
func (f *foreignSession) LastUpdateTime() time.Time { return f.updated }
