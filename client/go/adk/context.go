package adk

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/adk/v2/agent"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/plugin"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// changedOutput are the notices of a tool result that the effective context
// shows changed.
var changedOutput = map[string]bool{"TOOL_OUTPUT_TRUNCATED": true, "TOOL_OUTPUT_STUBBED": true}

// EffectiveContext is what ctxwarden's effective context of a session changes
// in the contents ADK builds from the session's events.
type EffectiveContext struct {
	// Prefix holds ctxwarden's messages before the history (memory block,
	// compaction summary), as user contents ("model" for an assistant message).
	Prefix []*genai.Content
	// Compacted: a checkpoint is in effect; the events before the first kept
	// one are summarised.
	Compacted bool
	// Kept holds the IDs of the events in the effective context.
	Kept map[string]bool
	// Outputs maps an event ID to its tool outputs as the effective context
	// shows them (truncated, stubbed), by the position of the function
	// response in the event (0 for the first).
	Outputs map[string]map[int]string
}

// ChangesNothing reports whether ApplyContext leaves contents as they are.
func (c *EffectiveContext) ChangesNothing() bool {
	return len(c.Prefix) == 0 && !c.Compacted && len(c.Outputs) == 0
}

// NewEffectiveContext returns the edits of a BuildModelInput answer (view
// FULL, the default of the native format).
func NewEffectiveContext(in *ctxwardenv1.ModelInput) *EffectiveContext {
	messages := in.GetMessages()
	n := 0
	for n < len(messages) && messages[n].GetMetadata()[EventEnvelopeKey] == "" && partOf(messages[n]) == "" {
		n++
	}
	c := &EffectiveContext{Compacted: in.GetCompactionId() != "", Kept: map[string]bool{}, Outputs: map[string]map[int]string{}}
	for _, m := range messages[:n] {
		role := genai.RoleUser
		if m.GetRole() == ctxwardenv1.Role_ROLE_ASSISTANT {
			role = genai.RoleModel
		}
		c.Prefix = append(c.Prefix, genai.NewContentFromText(messageText(m), genai.Role(role)))
	}
	changed := map[int64]bool{}
	for _, notice := range in.GetNotices() {
		if changedOutput[notice.GetCode()] {
			changed[notice.GetSeq()] = true
		}
	}
	for _, m := range messages[n:] {
		id, index := partIndex(m)
		if id == "" {
			id = eventID(m)
		}
		if id == "" {
			continue // e.g. a synthetic result for a call left open: ADK has its own rule
		}
		c.Kept[id] = true
		if changed[m.GetSeq()] && m.GetRole() == ctxwardenv1.Role_ROLE_TOOL_RESULT {
			if c.Outputs[id] == nil {
				c.Outputs[id] = map[int]string{}
			}
			c.Outputs[id][index] = messageText(m)
		}
	}
	return c
}

func messageText(m *ctxwardenv1.Message) string {
	var text string
	for _, b := range m.GetContent() {
		if t := b.GetText(); t != nil {
			text += t.GetText()
		}
	}
	return text
}

// contentKey is a content as comparable text, function-call IDs left out (ADK
// drops its own "adk-" IDs from the copies it sends to the model) and so are
// empty parts (ADK drops those too).
func contentKey(c *genai.Content) string {
	data, err := decodeObject(c)
	if err != nil {
		return ""
	}
	parts, _ := data["parts"].([]any)
	kept := parts[:0]
	for _, p := range parts {
		part, _ := p.(map[string]any)
		if len(part) == 0 {
			continue
		}
		for _, name := range []string{"functionCall", "functionResponse"} {
			if value, ok := part[name].(map[string]any); ok {
				delete(value, "id")
			}
		}
		kept = append(kept, part)
	}
	if parts != nil {
		data["parts"] = kept
	}
	b, _ := json.Marshal(data) // maps marshal with sorted keys
	return string(b)
}

// eventsOf returns, for each content, the index of the event it was made of
// (-1: none of them). It matches from the end, each content to the latest
// event not after the one matched to the content after it: the kept events are
// the history's tail, so a content that could be a compacted event's or a kept
// one's is taken for the kept one's.
func eventsOf(contents []*genai.Content, events []*session.Event) []int {
	positions := map[string][]int{}
	for i, e := range events {
		if e.Content != nil && len(e.Content.Parts) > 0 {
			k := contentKey(e.Content)
			positions[k] = append(positions[k], i)
		}
	}
	found := make([]int, len(contents))
	j := len(events) - 1
	for k := len(contents) - 1; k >= 0; k-- {
		found[k] = -1
		if contents[k] == nil {
			continue
		}
		candidates := positions[contentKey(contents[k])]
		at := sort.SearchInts(candidates, j+1) - 1 // the last candidate <= j
		if at >= 0 {
			found[k] = candidates[at]
			j = candidates[at] - 1
		}
	}
	return found
}

// withOutput returns c with its function responses replaced by outputs (by
// their position among the function responses).
func withOutput(c *genai.Content, outputs map[int]string) *genai.Content {
	out := *c
	out.Parts = make([]*genai.Part, len(c.Parts))
	k := 0
	for i, p := range c.Parts {
		if p != nil && p.FunctionResponse != nil {
			if text, ok := outputs[k]; ok {
				part := *p
				response := *p.FunctionResponse
				response.Response = map[string]any{"result": text}
				part.FunctionResponse = &response
				p = &part
			}
			k++
		}
		out.Parts[i] = p
	}
	return &out
}

// ApplyContext returns ADK's contents (built from events) edited to follow
// the effective context c: the contents of compacted events dropped and c's
// prefix put where the first of them was (with nothing compacted: before the
// content of the session's first event, when ADK sends it), changed tool
// outputs put in as the function response {"result": text}; other contents
// (those ADK adds itself, another agent's reply rewritten "For context: ...")
// stay as they are. A content is taken to come from an event when it equals
// that event's content, function-call IDs aside, matched in order from the
// newest.
func ApplyContext(contents []*genai.Content, events []*session.Event, c *EffectiveContext) []*genai.Content {
	cut := 0
	if c.Compacted {
		cut = slices.IndexFunc(events, func(e *session.Event) bool { return c.Kept[e.ID] })
		if cut < 0 {
			cut = len(events)
		}
	}
	first := slices.IndexFunc(events, func(e *session.Event) bool {
		return e.Content != nil && slices.ContainsFunc(e.Content.Parts, func(p *genai.Part) bool { return p != nil && !p.Thought })
	})
	out := make([]*genai.Content, 0, len(contents)+len(c.Prefix))
	prefixAt := -1
	for k, i := range eventsOf(contents, events) {
		content := contents[k]
		if i >= 0 && (i < cut || i == first) && prefixAt < 0 {
			prefixAt = len(out)
		}
		if i >= 0 && i < cut {
			continue
		}
		if i >= 0 {
			if outputs, ok := c.Outputs[events[i].ID]; ok {
				content = withOutput(content, outputs)
			}
		}
		out = append(out, content)
	}
	if prefixAt >= 0 {
		out = slices.Insert(out, prefixAt, c.Prefix...)
	}
	return out
}

// ContextPlugin sends the model ctxwarden's effective context of the sessions
// a SessionService stores. Before each model call it reads the session's
// effective context (BuildModelInput, incrementally), compacting first when
// ctxwarden recommends it (with a Summarizer, your LLM, through
// PrepareCompaction and CommitCompaction; without one, with the server's
// summariser through auto_compact), and edits the request's contents to match
// (see ApplyContext). Until ctxwarden changes something (a compaction, a
// truncated or stubbed tool output, a memory block) the request is exactly the
// one ADK built. Safe for concurrent use.
//
// Add it to the runner, runner.Config{PluginConfig: runner.PluginConfig{
// Plugins: []*plugin.Plugin{p.Plugin()}}}, or to one agent,
// llmagent.Config{BeforeModelCallbacks: []llmagent.BeforeModelCallback{p.BeforeModel}}.
type ContextPlugin struct {
	service    *SessionService
	summarizer Summarizer
	compact    bool
	name       string
	logger     *slog.Logger
	inputs     *ctxwarden.InputCache
	warned     sync.Map
}

// ContextOption configures a ContextPlugin.
type ContextOption func(*ContextPlugin)

// WithSummarizer makes the plugin compact with summarizer (agent-side)
// instead of the server's summariser.
func WithSummarizer(summarizer Summarizer) ContextOption {
	return func(p *ContextPlugin) { p.summarizer = summarizer }
}

// WithoutCompaction makes the plugin never compact (a compaction made
// elsewhere, e.g. by Compact, still applies).
func WithoutCompaction() ContextOption { return func(p *ContextPlugin) { p.compact = false } }

// WithPluginName sets the plugin's name (default "ctxwarden_context").
func WithPluginName(name string) ContextOption { return func(p *ContextPlugin) { p.name = name } }

// WithLogger sets where the plugin warns (default slog.Default()).
func WithLogger(logger *slog.Logger) ContextOption {
	return func(p *ContextPlugin) { p.logger = logger }
}

// NewContextPlugin returns the plugin for the sessions of service.
func NewContextPlugin(service *SessionService, opts ...ContextOption) *ContextPlugin {
	p := &ContextPlugin{service: service, compact: true, name: "ctxwarden_context", inputs: ctxwarden.NewInputCache(0)}
	for _, opt := range opts {
		opt(p)
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	return p
}

// Plugin returns the ADK plugin (its BeforeModelCallback is BeforeModel).
func (p *ContextPlugin) Plugin() *plugin.Plugin {
	pl, _ := plugin.New(plugin.Config{Name: p.name, BeforeModelCallback: p.BeforeModel}) // never fails
	return pl
}

// BeforeModel is the before-model callback: it edits req.Contents to follow
// the effective context of the session of ctx. It never answers for the model.
// The contents are matched against the events of the session object the
// service's Get (or Create) returned last for the session, the one ADK's
// runner is using (ADK's callback contexts do not give the session); without
// one, against the stored events.
func (p *ContextPlugin) BeforeModel(ctx agent.Context, req *model.LLMRequest) (*model.LLMResponse, error) {
	sid := p.service.Key(ctx.AppName(), ctx.UserID(), ctx.SessionID())
	var maxOutput int64
	if req.Config != nil {
		maxOutput = int64(req.Config.MaxOutputTokens)
	}
	c, err := p.Context(ctx, sid, maxOutput)
	if err != nil {
		return nil, err
	}
	if c == nil || c.ChangesNothing() {
		return nil, nil
	}
	var events []*session.Event
	if live := p.service.liveSession(sid); live != nil {
		events = slices.Collect(live.Events().All())
	} else if events, err = p.service.events(ctx, sid, 0, time.Time{}); err != nil {
		return nil, fmt.Errorf("ctxwarden adk: the events of %s: %w", sid, err)
	}
	req.Contents = ApplyContext(req.Contents, events, c)
	return nil, nil
}

// Context returns the effective context of ctxwarden session sid, compacted
// first when ctxwarden recommends it; nil (and no error) when there is no
// such session.
func (p *ContextPlugin) Context(ctx context.Context, sid string, maxOutputTokens int64) (*EffectiveContext, error) {
	in, err := p.read(ctx, sid, maxOutputTokens, false)
	if in == nil || err != nil {
		return nil, err
	}
	if in.GetCompactionRecommended() && p.compact {
		if in, err = p.compacted(ctx, sid, maxOutputTokens); in == nil || err != nil {
			return nil, err
		}
		if in.GetCompactionRecommended() {
			if _, seen := p.warned.LoadOrStore(sid, true); seen {
				return NewEffectiveContext(in), nil
			}
			p.logger.Warn("ctxwarden session is over its compaction threshold and was not compacted "+
				"(without WithSummarizer the server needs serve --summarizer)", "session_id", sid)
		}
	}
	return NewEffectiveContext(in), nil
}

func (p *ContextPlugin) read(ctx context.Context, sid string, maxOutput int64, autoCompact bool) (*ctxwardenv1.ModelInput, error) {
	in, err := p.inputs.Build(ctx, p.service.client, &ctxwardenv1.BuildModelInputRequest{
		SessionId:       sid,
		MaxOutputTokens: maxOutput,
		AutoCompact:     autoCompact,
		View:            ctxwardenv1.ModelInputView_MODEL_INPUT_VIEW_FULL,
	})
	if status.Code(err) == codes.NotFound {
		p.inputs.Forget(sid)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ctxwarden adk: BuildModelInput of %s: %w", sid, err)
	}
	return in, nil
}

func (p *ContextPlugin) compacted(ctx context.Context, sid string, maxOutput int64) (*ctxwardenv1.ModelInput, error) {
	if p.summarizer == nil {
		return p.read(ctx, sid, maxOutput, true)
	}
	if _, err := CompactWith(ctx, p.service.client, sid, p.summarizer); err != nil {
		switch reason := ctxwarden.ErrorReason(err); {
		case reason == "NOTHING_TO_COMPACT":
		case status.Code(err) == codes.Aborted:
			// another compaction of the session came first: its result is read next
		case status.Code(err) == codes.FailedPrecondition:
			p.logger.Warn("ctxwarden session was not compacted", "session_id", sid, "error", err)
		default:
			return nil, err
		}
	}
	return p.read(ctx, sid, maxOutput, false)
}
