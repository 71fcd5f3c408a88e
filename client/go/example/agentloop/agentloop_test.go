package agentloop_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/example/agentloop"
	"github.com/ctxwarden/ctxwarden/client/go/internal/testserver"
	"google.golang.org/protobuf/proto"
)

// TestRunExample runs the example flow against a real server and checks both
// what it printed and what the server now holds.
func TestRunExample(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := ctxwarden.Dial(ctx, srv.Target, ctxwarden.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var out bytes.Buffer
	if err := agentloop.RunExample(ctx, c, &out); err != nil {
		t.Fatalf("RunExample: %v (reason %q)\noutput:\n%s", err, ctxwarden.ErrorReason(err), out.String())
	}
	t.Logf("example output:\n%s", out.String())

	lines := map[string]string{} // label -> rest of the line
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		label, rest, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("unlabelled output line %q", line)
		}
		lines[label] = rest // a repeated label keeps its last line
	}
	for _, label := range []string{
		"session", "append user", "model input", "append tool call + result",
		"append failed assistant", "rollback", "append 7 more messages",
		"compaction plan", "compaction committed", "tokens", "first_kept_seq",
	} {
		if _, ok := lines[label]; !ok {
			t.Errorf("output has no %q line", label)
		}
	}
	sid := lines["session"]
	if sid == "" {
		t.Fatal("no session ID in the output")
	}
	wantRollback := "action=RECOVERY_ACTION_RETRY retry_after=2s rolled_back_seqs=[4]"
	if !strings.HasPrefix(lines["rollback"], wantRollback) {
		t.Errorf("rollback line = %q, want prefix %q", lines["rollback"], wantRollback)
	}
	if !strings.Contains(lines["model input"], "first_is_summary=true") {
		t.Errorf("last model input line = %q, want first_is_summary=true", lines["model input"])
	}

	// Server state: one checkpoint, written by the agent.
	lc, err := c.ListCompactions(ctx, &ctxwardenv1.ListCompactionsRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	if len(lc.GetCompactions()) != 1 {
		t.Fatalf("ListCompactions: %d checkpoints, want 1", len(lc.GetCompactions()))
	}
	comp := lc.GetCompactions()[0]
	if comp.GetSummarizer() != "agent" || comp.GetSuperseded() ||
		comp.GetTrigger() != ctxwardenv1.CompactionTrigger_COMPACTION_TRIGGER_MANUAL {
		t.Errorf("checkpoint: summarizer=%q superseded=%t trigger=%s", comp.GetSummarizer(), comp.GetSuperseded(), comp.GetTrigger())
	}
	if got := comp.GetReadFiles(); len(got) != 1 || got[0] != "setup.py" {
		t.Errorf("checkpoint read_files = %v, want [setup.py]", got)
	}
	if comp.GetTokensAfter() >= comp.GetTokensBefore() {
		t.Errorf("compaction did not shrink the context: %d -> %d", comp.GetTokensBefore(), comp.GetTokensAfter())
	}

	// The model input now starts with the summary message.
	in, err := c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	first := in.GetMessages()[0]
	if first.GetMetadata()[agentloop.SummaryMetadataKey] != comp.GetCompactionId() ||
		first.GetRole() != ctxwardenv1.Role_ROLE_USER {
		t.Errorf("first message is not the summary: role=%s metadata=%v", first.GetRole(), first.GetMetadata())
	}
	if text := first.GetContent()[0].GetText().GetText(); !strings.Contains(text, "<summary>") || !strings.Contains(text, "Stand-in summary") {
		t.Errorf("summary message text = %q", text)
	}
	if in.GetCompactionId() != comp.GetCompactionId() || in.GetFirstKeptSeq() != comp.GetFirstKeptSeq() {
		t.Errorf("model input compaction_id=%s first_kept_seq=%d, checkpoint %s/%d",
			in.GetCompactionId(), in.GetFirstKeptSeq(), comp.GetCompactionId(), comp.GetFirstKeptSeq())
	}
	if lines["first_kept_seq"] != itoa(in.GetFirstKeptSeq()) {
		t.Errorf("printed first_kept_seq %q, server says %d", lines["first_kept_seq"], in.GetFirstKeptSeq())
	}
	tk := in.GetTokens()
	if tk.GetSummaryTokens() == 0 || tk.GetSystemTokens()+tk.GetToolsTokens()+tk.GetSummaryTokens()+tk.GetMessageTokens() != tk.GetTotalTokens() {
		t.Errorf("token breakdown does not add up: %v", tk)
	}
	if !strings.Contains(lines["tokens"], "total="+itoa(tk.GetTotalTokens())+" ") {
		t.Errorf("printed tokens %q, server total %d", lines["tokens"], tk.GetTotalTokens())
	}

	// Same state, same bytes.
	again, err := c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	det := proto.MarshalOptions{Deterministic: true}
	b1, _ := det.Marshal(in)
	b2, _ := det.Marshal(again)
	if !bytes.Equal(b1, b2) {
		t.Error("BuildModelInput is not byte-stable")
	}

	// History is complete: 11 messages, the failed one rolled back.
	lm, err := c.ListMessages(ctx, &ctxwardenv1.ListMessagesRequest{SessionId: sid, IncludeRolledBack: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lm.GetMessages()); n != 11 {
		t.Fatalf("ListMessages: %d messages, want 11", n)
	}
	failed := lm.GetMessages()[3]
	if failed.GetSeq() != 4 || failed.GetState() != ctxwardenv1.MessageState_MESSAGE_STATE_ROLLED_BACK ||
		failed.GetErrorMessage() != "429 rate limit" {
		t.Errorf("message 4: seq=%d state=%s error=%q", failed.GetSeq(), failed.GetState(), failed.GetErrorMessage())
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
