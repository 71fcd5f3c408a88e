package adk

import (
	"context"
	"fmt"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

// Summarizer writes a summary with your LLM: send prompt.System as the system
// prompt and prompt.User as the single user message, with at most
// prompt.MaxTokens output tokens, and return the answer's text.
type Summarizer func(ctx context.Context, prompt *ctxwardenv1.SummaryPrompt) (string, error)

// CompactWith compacts ctxwarden session sid with summaries that summarizer
// writes: PrepareCompaction, the summarizer on each prompt of the plan (the
// turn-prefix prompt too when the plan splits a turn), CommitCompaction, and
// so on for each step of a chunked compaction. It returns the stored checkpoint.
func CompactWith(ctx context.Context, client ctxwardenv1.ContextServiceClient, sid string, summarizer Summarizer) (*ctxwardenv1.Compaction, error) {
	plan, err := client.PrepareCompaction(ctx, &ctxwardenv1.PrepareCompactionRequest{SessionId: sid})
	if err != nil {
		return nil, err
	}
	for {
		summary, err := summarizer(ctx, plan.GetHistoryPrompt())
		if err != nil {
			return nil, fmt.Errorf("ctxwarden adk: summarizer: %w", err)
		}
		var prefix string
		if plan.GetSplitTurn() {
			if prefix, err = summarizer(ctx, plan.GetTurnPrefixPrompt()); err != nil {
				return nil, fmt.Errorf("ctxwarden adk: summarizer (turn prefix): %w", err)
			}
		}
		done, err := client.CommitCompaction(ctx, &ctxwardenv1.CommitCompactionRequest{
			SessionId: sid, PlanId: plan.GetPlanId(), Summary: summary, TurnPrefixSummary: prefix,
		})
		if err != nil {
			return nil, err
		}
		if done.GetNextPlan() == nil {
			return done, nil
		}
		plan = done.GetNextPlan()
	}
}
