package ctxwarden

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// DefaultInputCacheSessions is how many sessions an InputCache holds an input
// for unless NewInputCache is given another capacity.
const DefaultInputCacheSessions = 64

// InputCache makes BuildModelInput incremental. It holds the last complete
// ModelInput of the most recently used sessions and sends its resume_token, so
// the server returns only what the client does not hold yet: the messages
// after the first ModelInput.messages_offset held ones (native inputs, view
// FULL), or the rendered_json after the first ModelInput.rendered_prefix_bytes
// bytes of the held rendered_json (a provider format, view BASIC). Build puts
// the held part back in front and returns the same complete input a plain
// BuildModelInput would.
//
// Safe for concurrent use. The zero value is ready to use and holds
// DefaultInputCacheSessions sessions.
type InputCache struct {
	mu       sync.Mutex
	capacity int
	lru      *list.List               // of *heldInput, most recently used first
	byID     map[string]*list.Element // session ID -> element of lru
}

type heldInput struct {
	sessionID string
	input     *ctxwardenv1.ModelInput
}

// NewInputCache returns an InputCache holding the inputs of up to capacity
// sessions (the least recently used is dropped first); capacity <= 0 means
// DefaultInputCacheSessions.
func NewInputCache(capacity int) *InputCache {
	return &InputCache{capacity: capacity}
}

// Build calls BuildModelInput with req, whose resume_token it sets (on a copy;
// req is not changed) to that of the input held for req.session_id, and
// returns the complete input: the held input's first messages_offset
// messages followed by the ones received, the first rendered_prefix_bytes
// bytes of the held rendered_json followed by the one received, every other
// field as received, messages_offset and rendered_prefix_bytes 0. The result
// is held for the next call.
//
// The returned input is shared with the cache and its messages with later
// results for the session: treat it as read-only (proto.Clone it to change
// it). Replays (req.as_of_seq set) are passed through without the cache. An
// answer the held input cannot complete (messages_offset beyond its
// messages, rendered_prefix_bytes beyond its rendered_json or inside a UTF-8
// character, or either with nothing held) is an error; the session's input
// is then dropped, so the next call fetches it whole.
func (c *InputCache) Build(ctx context.Context, client ctxwardenv1.ContextServiceClient,
	req *ctxwardenv1.BuildModelInputRequest, opts ...grpc.CallOption) (*ctxwardenv1.ModelInput, error) {
	if req.AsOfSeq != nil {
		return client.BuildModelInput(ctx, req, opts...)
	}
	sid := req.GetSessionId()
	held := c.get(sid)
	r := proto.Clone(req).(*ctxwardenv1.BuildModelInputRequest)
	r.ResumeToken = held.GetResumeToken()
	in, err := client.BuildModelInput(ctx, r, opts...)
	if err != nil {
		return nil, err
	}
	// Merge against the input whose token was sent, even if a concurrent
	// call has replaced it in the cache since.
	if offset := in.GetMessagesOffset(); offset != 0 {
		if offset < 0 || offset > int64(len(held.GetMessages())) {
			c.Forget(sid)
			return nil, fmt.Errorf("ctxwarden: BuildModelInput of session %q resumed at message %d, but the held input has %d",
				sid, offset, len(held.GetMessages()))
		}
		msgs := make([]*ctxwardenv1.Message, 0, int(offset)+len(in.Messages))
		msgs = append(msgs, held.Messages[:offset]...)
		in.Messages = append(msgs, in.Messages...)
		in.MessagesOffset = 0
	}
	if prefix := in.GetRenderedPrefixBytes(); prefix != 0 {
		if problem := renderedPrefixProblem(held, prefix); problem != "" {
			c.Forget(sid)
			return nil, fmt.Errorf("ctxwarden: BuildModelInput of session %q resumed rendered_json at byte %d, but %s",
				sid, prefix, problem)
		}
		in.RenderedJson = held.GetRenderedJson()[:prefix] + in.GetRenderedJson()
		in.RenderedPrefixBytes = 0
	}
	if in.GetResumeToken() == "" {
		c.Forget(sid) // not resumable (e.g. a keep_tool_results policy)
	} else {
		c.put(sid, in)
	}
	return in, nil
}

// renderedPrefixProblem says why the first prefix bytes of held's
// rendered_json cannot be kept ("" when they can).
func renderedPrefixProblem(held *ctxwardenv1.ModelInput, prefix int64) string {
	if held == nil {
		return "no input is held for the session"
	}
	r := held.GetRenderedJson()
	switch {
	case prefix < 0 || prefix > int64(len(r)):
		return fmt.Sprintf("the held rendered_json has %d bytes", len(r))
	case prefix < int64(len(r)) && !utf8.RuneStart(r[prefix]):
		return "that byte is inside a UTF-8 character of the held rendered_json"
	}
	return ""
}

// Forget drops the input held for sessionID (e.g. after deleting the session).
func (c *InputCache) Forget(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[sessionID]; ok {
		c.lru.Remove(e)
		delete(c.byID, sessionID)
	}
}

// Len returns how many sessions have an input held.
func (c *InputCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

func (c *InputCache) get(sessionID string) *ctxwardenv1.ModelInput {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[sessionID]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*heldInput).input
}

func (c *InputCache) put(sessionID string, in *ctxwardenv1.ModelInput) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = make(map[string]*list.Element)
		c.lru = list.New()
	}
	if e, ok := c.byID[sessionID]; ok {
		e.Value.(*heldInput).input = in
		c.lru.MoveToFront(e)
		return
	}
	c.byID[sessionID] = c.lru.PushFront(&heldInput{sessionID: sessionID, input: in})
	limit := c.capacity
	if limit <= 0 {
		limit = DefaultInputCacheSessions
	}
	for c.lru.Len() > limit {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.byID, oldest.Value.(*heldInput).sessionID)
	}
}
