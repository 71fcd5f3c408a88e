// Package agentloop is the flow of the Go example (../main.go): a minimal
// agent loop against a ctxwarden server, with a scripted stand-in for the
// model. It lives in its own package so the tests can run it against a real
// server.
package agentloop

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

// SummaryMetadataKey marks the summary message of a model input; its value is
// the compaction ID.
const SummaryMetadataKey = "ctxwarden.summary"

// RunExample runs the example flow against c and writes labelled lines to out:
//
//	create a session -> append a user message -> BuildModelInput ->
//	tool call + result -> a failed model call and RollbackTurn ->
//	more turns -> PrepareCompaction / CommitCompaction (agent-side summary) ->
//	BuildModelInput with its token breakdown.
func RunExample(ctx context.Context, c ctxwardenv1.ContextServiceClient, out io.Writer) error {
	p := func(format string, args ...interface{}) { fmt.Fprintf(out, format+"\n", args...) }

	// 1. A session with a system prompt, one tool and a small keep_recent_tokens
	// so that compaction has something to summarise after a few turns.
	session, err := c.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{
		Session: &ctxwardenv1.Session{
			Title:        "go example",
			SystemPrompt: "You are a careful coding agent. Read files before answering.",
			Tools: []*ctxwardenv1.ToolDefinition{{
				Name:           "read",
				Description:    "Read a file",
				ParametersJson: `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
			}},
			Policy: &ctxwardenv1.ContextPolicy{KeepRecentTokens: 60},
		},
	})
	if err != nil {
		return fmt.Errorf("CreateSession: %w", err)
	}
	sid := session.GetSessionId()
	p("session: %s", sid)

	appendMsgs := func(msgs ...*ctxwardenv1.Message) (*ctxwardenv1.AppendMessagesResponse, error) {
		return c.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: sid, Messages: msgs})
	}

	// 2. The user asks; the agent asks ctxwarden what to send to the model.
	resp, err := appendMsgs(ctxwarden.User("What does setup.py do?"))
	if err != nil {
		return fmt.Errorf("AppendMessages(user): %w", err)
	}
	p("append user: seq=%d context_tokens=%d", resp.GetLastSeq(), resp.GetContextTokens())
	in, err := c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	if err != nil {
		return fmt.Errorf("BuildModelInput: %w", err)
	}
	p("model input: messages=%d total_tokens=%d", len(in.GetMessages()), in.GetTokens().GetTotalTokens())

	// 3. The model calls the read tool; the agent runs it and records the result.
	resp, err = appendMsgs(
		ctxwarden.Assistant("Let me look.", ctxwarden.ToolCall("call-1", "read", `{"path":"setup.py"}`)),
		ctxwarden.ToolResult("call-1", setupPy),
	)
	if err != nil {
		return fmt.Errorf("AppendMessages(tool call): %w", err)
	}
	p("append tool call + result: seqs=%s", seqs(resp.GetMessages()))

	// 4. The next model call fails: record it, then ask what to do.
	resp, err = appendMsgs(ctxwarden.FailedAssistant("429 rate limit"))
	if err != nil {
		return fmt.Errorf("AppendMessages(failed): %w", err)
	}
	p("append failed assistant: seq=%d error=%q", resp.GetLastSeq(), "429 rate limit")
	rb, err := c.RollbackTurn(ctx, &ctxwardenv1.RollbackTurnRequest{SessionId: sid})
	if err != nil {
		return fmt.Errorf("RollbackTurn: %w", err)
	}
	p("rollback: action=%s retry_after=%s rolled_back_seqs=%v reason=%q",
		rb.GetAction(), rb.GetRetryAfter().AsDuration(), rb.GetRolledBackSeqs(), rb.GetReason())
	if rb.GetAction() != ctxwardenv1.RecoveryAction_RECOVERY_ACTION_RETRY {
		return fmt.Errorf("rollback: want RECOVERY_ACTION_RETRY, got %s", rb.GetAction())
	}
	// A real agent sleeps retry_after here before calling the model again.

	// 5. The retried call succeeds, and the conversation goes on for a few turns.
	turns := []*ctxwardenv1.Message{
		ctxwarden.Assistant("setup.py packages demo 0.1 from src/ with setuptools, reads README.md as the long description and installs a demo console script."),
		ctxwarden.User("Does it declare any dependencies?"),
		ctxwarden.Assistant("No: setup() has no install_requires, only python_requires >= 3.9."),
		ctxwarden.User("Then add requests as a dependency, please."),
		ctxwarden.Assistant("I would add install_requires=['requests'] to the setup() call."),
		ctxwarden.User("Good. Also explain what version pinning would change."),
		ctxwarden.Assistant("Pinning (requests==2.32.3) makes installs reproducible but blocks fixes; a range (>=2.31,<3) is a common compromise."),
	}
	resp, err = appendMsgs(turns...)
	if err != nil {
		return fmt.Errorf("AppendMessages(turns): %w", err)
	}
	p("append %d more messages: last_seq=%d context_tokens=%d", len(turns), resp.GetLastSeq(), resp.GetContextTokens())

	// 6. Agent-side compaction: ctxwarden plans the cut and writes the prompts,
	// the agent's own LLM writes the summary (here a stand-in), ctxwarden commits it.
	plan, err := c.PrepareCompaction(ctx, &ctxwardenv1.PrepareCompactionRequest{SessionId: sid})
	if err != nil {
		return fmt.Errorf("PrepareCompaction: %w", err)
	}
	p("compaction plan: summarize seqs %d..%d first_kept_seq=%d tokens_before=%d split_turn=%t summary_budget=%d",
		plan.GetSummarizedFromSeq(), plan.GetSummarizedToSeq(), plan.GetFirstKeptSeq(),
		plan.GetTokensBefore(), plan.GetSplitTurn(), plan.GetHistoryPrompt().GetMaxTokens())
	commit := &ctxwardenv1.CommitCompactionRequest{
		SessionId: sid,
		PlanId:    plan.GetPlanId(),
		Summary:   standInSummary(plan.GetHistoryPrompt(), plan),
	}
	if plan.GetSplitTurn() {
		commit.TurnPrefixSummary = standInSummary(plan.GetTurnPrefixPrompt(), plan)
	}
	comp, err := c.CommitCompaction(ctx, commit)
	if err != nil {
		return fmt.Errorf("CommitCompaction: %w", err)
	}
	p("compaction committed: id=%s tokens %d -> %d read_files=%v summarizer=%s",
		comp.GetCompactionId(), comp.GetTokensBefore(), comp.GetTokensAfter(), comp.GetReadFiles(), comp.GetSummarizer())

	// 7. What the model sees now: the summary first, then the kept messages.
	in, err = c.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	if err != nil {
		return fmt.Errorf("BuildModelInput: %w", err)
	}
	if len(in.GetMessages()) == 0 {
		return fmt.Errorf("BuildModelInput after compaction: no messages")
	}
	first := in.GetMessages()[0]
	p("model input: messages=%d first_is_summary=%t compaction_id=%s",
		len(in.GetMessages()), first.GetMetadata()[SummaryMetadataKey] == comp.GetCompactionId(), in.GetCompactionId())
	t := in.GetTokens()
	p("tokens: system=%d tools=%d summary=%d messages=%d total=%d window=%d threshold=%d",
		t.GetSystemTokens(), t.GetToolsTokens(), t.GetSummaryTokens(), t.GetMessageTokens(),
		t.GetTotalTokens(), t.GetContextWindow(), t.GetCompactionThreshold())
	p("first_kept_seq: %d", in.GetFirstKeptSeq())
	return nil
}

// standInSummary stands in for the agent's LLM: a real agent sends
// prompt.System and prompt.User to its model with prompt.MaxTokens as the
// output limit and uses the answer.
func standInSummary(prompt *ctxwardenv1.SummaryPrompt, plan *ctxwardenv1.CompactionPlan) string {
	var b strings.Builder
	b.WriteString("## Goal\nUnderstand and update setup.py of the demo package.\n")
	b.WriteString("## Progress\n### Done\n- Read setup.py: package demo 0.1, src layout, no dependencies.\n")
	fmt.Fprintf(&b, "## Critical Context\nStand-in summary of messages %d..%d (prompt of %d characters, budget %d tokens).\n",
		plan.GetSummarizedFromSeq(), plan.GetSummarizedToSeq(), len(prompt.GetUser()), prompt.GetMaxTokens())
	return b.String()
}

// setupPy is the file the stand-in "read" tool returns.
const setupPy = `"""Packaging for demo: a small example library."""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
README = (HERE / "README.md").read_text(encoding="utf-8")

setup(
    name="demo",
    version="0.1",
    description="A small example library",
    long_description=README,
    long_description_content_type="text/markdown",
    author="Demo Authors",
    license="Apache-2.0",
    packages=find_packages(where="src"),
    package_dir={"": "src"},
    python_requires=">=3.9",
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Operating System :: OS Independent",
    ],
    entry_points={"console_scripts": ["demo=demo.cli:main"]},
)
`

func seqs(msgs []*ctxwardenv1.Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = fmt.Sprint(m.GetSeq())
	}
	return strings.Join(parts, ",")
}
