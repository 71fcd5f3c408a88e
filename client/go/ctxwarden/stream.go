package ctxwarden

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Coalescing limits: one merged request carries at most this many messages
// and bytes.
const (
	coalesceMaxMessages = 100
	coalesceMaxBytes    = 1 << 20
	// DefaultCoalesceWindow is how long a streamed append waits for others
	// to share its request, and only while earlier requests are unanswered.
	DefaultCoalesceWindow = 2 * time.Millisecond
	// DefaultMaxInFlight bounds the unanswered sends of a MessageStream.
	DefaultMaxInFlight = 32
)

// StreamOption configures OpenMessageStream.
type StreamOption func(*MessageStream)

// WithoutCoalescing sends one StreamMessages request per Send.
func WithoutCoalescing() StreamOption { return func(s *MessageStream) { s.coalesce = false } }

// WithCoalesceWindow sets the longest wait for company (0: merge only what
// is already queued).
func WithCoalesceWindow(d time.Duration) StreamOption {
	return func(s *MessageStream) { s.window = d }
}

// WithMaxInFlight bounds the unanswered sends (further senders wait).
func WithMaxInFlight(n int) StreamOption {
	return func(s *MessageStream) { s.slots = make(chan struct{}, max(1, n)) }
}

type streamResult struct {
	resp *ctxwardenv1.AppendMessagesResponse
	err  error
}

type streamSend struct {
	req  *ctxwardenv1.AppendMessagesRequest
	done chan streamResult
}

// MessageStream is a helper over the bidirectional StreamMessages RPC. Send
// may be called from many goroutines; requests go out in call order and each
// Send gets its own response.
//
// By default it coalesces: plain appends to one session (no
// expected_last_seq, request_id or state_delta) that queue up while earlier
// requests are unanswered go out as one request, waiting at most the
// coalesce window for company, so concurrent senders get the throughput of
// batched appends; a lone sender is never delayed. An error fails every
// request merged with the failing one, and none of their messages is stored
// (the server ends the stream on an error anyway).
type MessageStream struct {
	stream   grpc.BidiStreamingClient[ctxwardenv1.AppendMessagesRequest, ctxwardenv1.AppendMessagesResponse]
	cancel   context.CancelFunc
	coalesce bool
	window   time.Duration
	slots    chan struct{}

	mu      sync.Mutex
	queued  []*streamSend   // not written yet
	sent    [][]*streamSend // written, unanswered: the members of each request
	err     error           // how the stream ended
	closing bool
	wake    chan struct{}
	done    chan struct{}

	requestsSent atomic.Int64
}

// OpenMessageStream starts a StreamMessages call on client; ctx bounds the
// whole stream. Close it when done.
func OpenMessageStream(ctx context.Context, client ctxwardenv1.ContextServiceClient, opts ...StreamOption) (*MessageStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := client.StreamMessages(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &MessageStream{
		stream: stream, cancel: cancel, coalesce: true, window: DefaultCoalesceWindow,
		slots: make(chan struct{}, DefaultMaxInFlight),
		wake:  make(chan struct{}, 1), done: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	go s.write()
	go s.read()
	return s, nil
}

// RequestsSent is the number of requests written so far (fewer than the
// sends when they were coalesced).
func (s *MessageStream) RequestsSent() int64 { return s.requestsSent.Load() }

// Send appends req's messages and waits for its response (or ctx).
func (s *MessageStream) Send(ctx context.Context, req *ctxwardenv1.AppendMessagesRequest) (*ctxwardenv1.AppendMessagesResponse, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	item := &streamSend{req: req, done: make(chan streamResult, 1)}
	s.mu.Lock()
	if s.err != nil || s.closing {
		err := s.err
		s.mu.Unlock()
		<-s.slots
		if err == nil || errors.Is(err, io.EOF) {
			err = status.Error(codes.Canceled, "the message stream is closed")
		}
		return nil, err
	}
	s.queued = append(s.queued, item)
	s.mu.Unlock()
	s.signal()
	select {
	case r := <-item.done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Close ends the request stream after the queued sends and waits for the
// server to answer them.
func (s *MessageStream) Close() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
	<-s.done
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

func (s *MessageStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func mergeable(r *ctxwardenv1.AppendMessagesRequest) bool {
	return len(r.GetMessages()) > 0 && r.ExpectedLastSeq == nil && r.GetRequestId() == "" && r.GetStateDelta() == nil
}

// take removes the next request's members from the queue (under s.mu).
func (s *MessageStream) take(lingered bool) (members []*streamSend, wait bool) {
	first := s.queued[0]
	members = []*streamSend{first}
	if !s.coalesce || !mergeable(first.req) {
		s.queued = s.queued[1:]
		return members, false
	}
	n, size := len(first.req.GetMessages()), proto.Size(first.req)
	for _, next := range s.queued[1:] {
		r := next.req
		if !mergeable(r) || r.GetSessionId() != first.req.GetSessionId() || r.GetView() != first.req.GetView() ||
			n+len(r.GetMessages()) > coalesceMaxMessages || size+proto.Size(r) > coalesceMaxBytes {
			s.queued = s.queued[len(members):]
			return members, false
		}
		members = append(members, next)
		n, size = n+len(r.GetMessages()), size+proto.Size(r)
	}
	// The queue is used up: wait once for company while earlier requests are
	// unanswered (a lone sender is never held).
	if !lingered && s.window > 0 && len(s.sent) > 0 && n < coalesceMaxMessages && !s.closing {
		return nil, true
	}
	s.queued = s.queued[len(members):]
	return members, false
}

func merged(members []*streamSend) *ctxwardenv1.AppendMessagesRequest {
	if len(members) == 1 {
		return members[0].req
	}
	first := members[0].req
	out := &ctxwardenv1.AppendMessagesRequest{SessionId: first.GetSessionId(), View: first.GetView()}
	for _, m := range members {
		out.Messages = append(out.Messages, m.req.GetMessages()...)
	}
	return out
}

func (s *MessageStream) write() {
	lingered := false
	for {
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		if len(s.queued) == 0 {
			closing := s.closing
			s.mu.Unlock()
			if closing {
				_ = s.stream.CloseSend()
				return
			}
			<-s.wake
			continue
		}
		members, wait := s.take(lingered)
		if wait {
			s.mu.Unlock()
			lingered = true
			time.Sleep(s.window)
			continue
		}
		lingered = false
		s.sent = append(s.sent, members)
		s.mu.Unlock()
		s.requestsSent.Add(1)
		if err := s.stream.Send(merged(members)); err != nil {
			return // the reader gets the stream's status from Recv
		}
	}
}

func (s *MessageStream) read() {
	defer close(s.done)
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		if len(s.sent) == 0 {
			s.mu.Unlock()
			s.fail(status.Error(codes.Internal, "StreamMessages sent a response with no request outstanding"))
			s.cancel()
			return
		}
		members := s.sent[0]
		s.sent = s.sent[1:]
		s.mu.Unlock()
		for i, part := range split(resp, members) {
			<-s.slots
			members[i].done <- streamResult{resp: part}
		}
	}
}

// split gives each member its stored messages and last_seq as of its last
// one; context_tokens is the context after the whole merged append.
func split(resp *ctxwardenv1.AppendMessagesResponse, members []*streamSend) []*ctxwardenv1.AppendMessagesResponse {
	out := make([]*ctxwardenv1.AppendMessagesResponse, len(members))
	total := 0
	for _, m := range members {
		total += len(m.req.GetMessages())
	}
	if len(members) == 1 || len(resp.GetMessages()) != total {
		for i := range out {
			out[i] = resp
		}
		return out
	}
	start := 0
	for i, m := range members {
		mine := resp.GetMessages()[start : start+len(m.req.GetMessages())]
		start += len(mine)
		out[i] = &ctxwardenv1.AppendMessagesResponse{
			Messages: mine, LastSeq: mine[len(mine)-1].GetSeq(), ContextTokens: resp.GetContextTokens(),
		}
	}
	return out
}

// fail ends the stream with err (io.EOF: the server ended it) and fails
// every unanswered send.
func (s *MessageStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	var failed []*streamSend
	for _, members := range s.sent {
		failed = append(failed, members...)
	}
	failed = append(failed, s.queued...)
	s.sent, s.queued = nil, nil
	s.mu.Unlock()
	s.signal()
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Internal, "StreamMessages ended with requests unanswered")
	}
	for _, f := range failed {
		<-s.slots
		f.done <- streamResult{err: err}
	}
}
