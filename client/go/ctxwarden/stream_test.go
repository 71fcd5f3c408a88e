package ctxwarden_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func streamSession(t *testing.T, ctx context.Context, c *ctxwarden.Client) string {
	t.Helper()
	s, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: &ctxwardenv1.Session{Title: "stream"}})
	if err != nil {
		t.Fatal(err)
	}
	return s.GetSessionId()
}

func storedTexts(t *testing.T, ctx context.Context, c *ctxwarden.Client, sid string) ([]int64, []string) {
	t.Helper()
	resp, err := c.ListMessages(ctx, &ctxwardenv1.ListMessagesRequest{SessionId: sid, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	var texts []string
	for _, m := range resp.GetMessages() {
		seqs = append(seqs, m.GetSeq())
		texts = append(texts, m.GetContent()[0].GetText().GetText())
	}
	return seqs, texts
}

// TestMessageStreamCoalesces: concurrent senders on one stream share
// requests against a real server; each gets its own messages and last_seq,
// and the session stays dense.
func TestMessageStreamCoalesces(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sid := streamSession(t, ctx, c)

	const sends = 40
	stream, err := ctxwarden.OpenMessageStream(ctx, c, ctxwarden.WithMaxInFlight(sends))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]*ctxwardenv1.AppendMessagesResponse, sends)
	errs := make([]error, sends)
	for i := 0; i < sends; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			got[i], errs[i] = stream.Send(ctx, &ctxwardenv1.AppendMessagesRequest{
				SessionId: sid, Messages: []*ctxwardenv1.Message{ctxwarden.User(fmt.Sprintf("g%d", i))},
			})
		}(i)
	}
	wg.Wait()
	if err := stream.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	seen := map[int64]bool{}
	for i := 0; i < sends; i++ {
		if errs[i] != nil {
			t.Fatalf("send %d: %v", i, errs[i])
		}
		r := got[i]
		if len(r.GetMessages()) != 1 || r.GetMessages()[0].GetContent()[0].GetText().GetText() != fmt.Sprintf("g%d", i) {
			t.Fatalf("send %d got another's answer: %v", i, r)
		}
		if r.GetLastSeq() != r.GetMessages()[0].GetSeq() || seen[r.GetLastSeq()] {
			t.Fatalf("send %d: last_seq %d", i, r.GetLastSeq())
		}
		seen[r.GetLastSeq()] = true
	}
	if n := stream.RequestsSent(); n >= sends {
		t.Errorf("RequestsSent = %d, want fewer than %d sends", n, sends)
	}
	seqs, _ := storedTexts(t, ctx, c, sid)
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("stored seqs %v are not 1..%d", seqs, sends)
		}
	}
	if len(seqs) != sends {
		t.Fatalf("stored %d messages, want %d", len(seqs), sends)
	}
}

// TestMessageStreamOrderErrorsAndOptOut: sequential sends go one by one (never
// held by the window), keyed requests go alone, an error fails every request
// merged with it and ends the stream, and WithoutCoalescing sends one request
// per Send.
func TestMessageStreamOrderErrorsAndOptOut(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sid := streamSession(t, ctx, c)

	stream, err := ctxwarden.OpenMessageStream(ctx, c, ctxwarden.WithCoalesceWindow(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		req := &ctxwardenv1.AppendMessagesRequest{
			SessionId: sid, Messages: []*ctxwardenv1.Message{ctxwarden.User(fmt.Sprintf("s%d", i))},
		}
		if i == 1 {
			req.RequestId = fmt.Sprintf("%s-k%d", sid, i) // keyed: never merged
		}
		sendCtx, done := context.WithTimeout(ctx, 2*time.Second)
		r, err := stream.Send(sendCtx, req)
		done()
		if err != nil || r.GetLastSeq() != int64(i+1) {
			t.Fatalf("send %d: %v %v (a lone sender must not wait for the window)", i, r, err)
		}
	}
	var wg sync.WaitGroup
	failed := make([]error, 8)
	for i := range failed {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, failed[i] = stream.Send(ctx, &ctxwardenv1.AppendMessagesRequest{
				SessionId: "no-such-session", Messages: []*ctxwardenv1.Message{ctxwarden.User("x")},
			})
		}(i)
	}
	wg.Wait()
	for i, err := range failed {
		if err == nil {
			t.Fatalf("send %d to a missing session succeeded", i)
		}
	}
	if status.Code(failed[0]) != codes.NotFound {
		t.Errorf("first failure %v, want NOT_FOUND", failed[0])
	}
	if _, err := stream.Send(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: sid, Messages: []*ctxwardenv1.Message{ctxwarden.User("late")}}); err == nil {
		t.Error("a send after the stream failed succeeded")
	}
	_ = stream.Close()

	plain, err := ctxwarden.OpenMessageStream(ctx, c, ctxwarden.WithoutCoalescing(), ctxwarden.WithMaxInFlight(10))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := plain.Send(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: sid, Messages: []*ctxwardenv1.Message{ctxwarden.User("p")}}); err != nil {
				t.Errorf("plain send %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	if n := plain.RequestsSent(); n != 10 {
		t.Errorf("WithoutCoalescing: RequestsSent = %d, want 10", n)
	}
	seqs, _ := storedTexts(t, ctx, c, sid)
	if len(seqs) != 13 || seqs[12] != 13 {
		t.Errorf("stored seqs %v, want 1..13", seqs)
	}
}
