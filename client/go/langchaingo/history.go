package langchaingo

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/schema"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Namespace is the default first part of the ctxwarden session ID of a chat
// history (see SessionKey), the one the Python adapter uses too.
const Namespace = "lc"

// ChatMessageHistory is LangChainGo's schema.ChatMessageHistory in one
// ctxwarden session: SessionKey(namespace, sessionID) unless
// WithCtxwardenSessionID names it. Messages returns the session's effective
// context (after a compaction: the summary, then the kept messages), compacted
// first when ctxwarden recommends it and the history has a way to
// (WithSummarizer, WithAutoCompact). Clear starts the session over (same ID
// and settings, no messages). The session is created on the first write, with
// the settings of WithTemplate. Safe for concurrent use; the client stays the
// caller's.
type ChatMessageHistory struct {
	client      ctxwardenv1.ContextServiceClient
	sessionID   string
	template    *ctxwardenv1.Session
	summarizer  Summarizer
	autoCompact bool
	maxOutput   int64
	logger      *slog.Logger
	inputs      *ctxwarden.InputCache

	mu     sync.Mutex
	exists bool
	warned bool
}

var _ schema.ChatMessageHistory = (*ChatMessageHistory)(nil)

type historyOptions struct {
	namespace string
	explicit  string
}

// Option configures a ChatMessageHistory.
type Option func(*ChatMessageHistory, *historyOptions)

// WithNamespace sets the first part of the session ID (default Namespace).
func WithNamespace(namespace string) Option {
	return func(_ *ChatMessageHistory, o *historyOptions) { o.namespace = namespace }
}

// WithCtxwardenSessionID names the ctxwarden session itself (no SessionKey).
func WithCtxwardenSessionID(id string) Option {
	return func(_ *ChatMessageHistory, o *historyOptions) { o.explicit = id }
}

// WithTemplate gives the session its settings when the history creates it
// (model, policy, system prompt, user and project).
func WithTemplate(template *ctxwardenv1.Session) Option {
	return func(h *ChatMessageHistory, _ *historyOptions) {
		h.template = proto.Clone(template).(*ctxwardenv1.Session)
	}
}

// WithSummarizer makes Messages compact first, with summarizer writing the
// summary (agent-side: PrepareCompaction, CommitCompaction), when ctxwarden
// recommends it.
func WithSummarizer(summarizer Summarizer) Option {
	return func(h *ChatMessageHistory, _ *historyOptions) { h.summarizer = summarizer }
}

// WithAutoCompact makes Messages compact first with the server's summariser
// (BuildModelInput auto_compact; needs serve --summarizer) when the context
// would cross the compaction threshold.
func WithAutoCompact() Option {
	return func(h *ChatMessageHistory, _ *historyOptions) { h.autoCompact = true }
}

// WithMaxOutputTokens sets the output tokens the model may produce (default:
// the policy's reserve): the compaction threshold keeps that much room free.
func WithMaxOutputTokens(n int64) Option {
	return func(h *ChatMessageHistory, _ *historyOptions) { h.maxOutput = n }
}

// WithLogger sets where the history warns (default slog.Default()).
func WithLogger(logger *slog.Logger) Option {
	return func(h *ChatMessageHistory, _ *historyOptions) { h.logger = logger }
}

// NewChatMessageHistory returns the history sessionID over client (e.g. a
// *ctxwarden.Client). It fails only for an invalid namespace.
func NewChatMessageHistory(client ctxwardenv1.ContextServiceClient, sessionID string, opts ...Option) (*ChatMessageHistory, error) {
	h := &ChatMessageHistory{client: client, template: &ctxwardenv1.Session{}, logger: slog.Default(),
		inputs: ctxwarden.NewInputCache(1)}
	o := historyOptions{namespace: Namespace}
	for _, opt := range opts {
		opt(h, &o)
	}
	h.sessionID = o.explicit
	if h.sessionID == "" {
		key, err := SessionKey(o.namespace, sessionID)
		if err != nil {
			return nil, err
		}
		h.sessionID = key
	}
	return h, nil
}

// CtxwardenSessionID returns the ID of the history's ctxwarden session.
func (h *ChatMessageHistory) CtxwardenSessionID() string { return h.sessionID }

// AddMessage appends a message.
func (h *ChatMessageHistory) AddMessage(ctx context.Context, message llms.ChatMessage) error {
	return h.AddMessages(ctx, []llms.ChatMessage{message})
}

// AddUserMessage appends a HumanChatMessage.
func (h *ChatMessageHistory) AddUserMessage(ctx context.Context, text string) error {
	return h.AddMessage(ctx, llms.HumanChatMessage{Content: text})
}

// AddAIMessage appends an AIChatMessage.
func (h *ChatMessageHistory) AddAIMessage(ctx context.Context, text string) error {
	return h.AddMessage(ctx, llms.AIChatMessage{Content: text})
}

// AddMessages appends messages in one atomic append (recreating the session
// if it was deleted meanwhile).
func (h *ChatMessageHistory) AddMessages(ctx context.Context, messages []llms.ChatMessage) error {
	if len(messages) == 0 {
		return nil
	}
	converted := make([]*ctxwardenv1.Message, len(messages))
	for i, m := range messages {
		c, err := ToMessage(m)
		if err != nil {
			return err
		}
		converted[i] = c
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.append(ctx, converted)
}

func (h *ChatMessageHistory) append(ctx context.Context, messages []*ctxwardenv1.Message) error {
	if err := h.ensure(ctx); err != nil {
		return err
	}
	req := &ctxwardenv1.AppendMessagesRequest{SessionId: h.sessionID, Messages: messages,
		View: ctxwardenv1.MessageView_MESSAGE_VIEW_BASIC}
	_, err := h.client.AppendMessages(ctx, req)
	if status.Code(err) == codes.NotFound {
		if err = h.create(ctx, h.template); err == nil {
			_, err = h.client.AppendMessages(ctx, req)
		}
	}
	if err != nil {
		return fmt.Errorf("ctxwarden langchaingo: append to %s: %w", h.sessionID, err)
	}
	return nil
}

func (h *ChatMessageHistory) ensure(ctx context.Context) error {
	if h.exists {
		return nil
	}
	_, err := h.client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: h.sessionID})
	if status.Code(err) == codes.NotFound {
		return h.create(ctx, h.template)
	}
	if err != nil {
		return fmt.Errorf("ctxwarden langchaingo: get session %s: %w", h.sessionID, err)
	}
	h.exists = true
	return nil
}

func (h *ChatMessageHistory) create(ctx context.Context, settings *ctxwardenv1.Session) error {
	_, err := h.client.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: settings, SessionId: h.sessionID})
	if err != nil && status.Code(err) != codes.AlreadyExists { // another writer may have made it first
		return fmt.Errorf("ctxwarden langchaingo: create session %s: %w", h.sessionID, err)
	}
	h.exists = true
	return nil
}

// Messages returns the session's effective context as LangChainGo messages
// (none without a session), compacted first when ctxwarden recommends it and
// the history has a summarizer or auto-compaction.
func (h *ChatMessageHistory) Messages(ctx context.Context) ([]llms.ChatMessage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in, err := h.read(ctx, false)
	if in == nil || err != nil {
		return nil, err
	}
	if in.GetCompactionRecommended() && (h.summarizer != nil || h.autoCompact) {
		if h.summarizer != nil {
			if _, err := CompactWith(ctx, h.client, h.sessionID, h.summarizer); err != nil &&
				ctxwarden.ErrorReason(err) != "NOTHING_TO_COMPACT" && status.Code(err) != codes.Aborted {
				return nil, fmt.Errorf("ctxwarden langchaingo: compact %s: %w", h.sessionID, err)
			}
			in, err = h.read(ctx, false)
		} else {
			in, err = h.read(ctx, true)
		}
		if in == nil || err != nil {
			return nil, err
		}
		if in.GetCompactionRecommended() && !h.warned {
			h.warned = true
			h.logger.Warn("ctxwarden session is over its compaction threshold and was not compacted "+
				"(WithAutoCompact needs serve --summarizer)", "session_id", h.sessionID)
		}
	}
	out := make([]llms.ChatMessage, len(in.GetMessages()))
	for i, m := range in.GetMessages() {
		out[i] = FromMessage(m)
	}
	return out, nil
}

func (h *ChatMessageHistory) read(ctx context.Context, autoCompact bool) (*ctxwardenv1.ModelInput, error) {
	in, err := h.inputs.Build(ctx, h.client, &ctxwardenv1.BuildModelInputRequest{
		SessionId: h.sessionID, MaxOutputTokens: h.maxOutput, AutoCompact: autoCompact,
		View: ctxwardenv1.ModelInputView_MODEL_INPUT_VIEW_FULL,
	})
	if status.Code(err) == codes.NotFound {
		h.exists = false
		h.inputs.Forget(h.sessionID)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ctxwarden langchaingo: BuildModelInput of %s: %w", h.sessionID, err)
	}
	return in, nil
}

// Clear starts the session over: DeleteSession, then CreateSession with the
// same ID and settings (system prompt, model, tools, policy, user, project,
// title, labels), no messages and no state.
func (h *ChatMessageHistory) Clear(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clear(ctx)
}

func (h *ChatMessageHistory) clear(ctx context.Context) error {
	old, err := h.client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: h.sessionID})
	if status.Code(err) == codes.NotFound {
		h.exists = false
		return nil
	}
	if err != nil {
		return fmt.Errorf("ctxwarden langchaingo: get session %s: %w", h.sessionID, err)
	}
	fresh := &ctxwardenv1.Session{
		UserId: old.GetUserId(), ProjectId: old.GetProjectId(), Title: old.GetTitle(),
		SystemPrompt: old.GetSystemPrompt(), Tools: old.GetTools(), Model: old.GetModel(),
		Policy: old.GetPolicy(), Labels: old.GetLabels(),
	}
	if _, err := h.client.DeleteSession(ctx, &ctxwardenv1.DeleteSessionRequest{SessionId: h.sessionID}); err != nil &&
		status.Code(err) != codes.NotFound {
		return fmt.Errorf("ctxwarden langchaingo: delete session %s: %w", h.sessionID, err)
	}
	h.inputs.Forget(h.sessionID)
	return h.create(ctx, fresh)
}

// SetMessages replaces the messages: Clear, then one append of messages (two
// steps: a reader in between sees no messages).
func (h *ChatMessageHistory) SetMessages(ctx context.Context, messages []llms.ChatMessage) error {
	converted := make([]*ctxwardenv1.Message, len(messages))
	for i, m := range messages {
		c, err := ToMessage(m)
		if err != nil {
			return err
		}
		converted[i] = c
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.clear(ctx); err != nil {
		return err
	}
	if len(converted) == 0 {
		return nil
	}
	return h.append(ctx, converted)
}
