package langchaingo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"github.com/ctxwarden/ctxwarden/client/go/langchaingo"
	"github.com/google/go-cmp/cmp"
	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/memory"
	"github.com/tmc/langchaingo/prompts"
	"github.com/tmc/langchaingo/schema"
	"github.com/tmc/langchaingo/tools"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	turns       = 30
	restartAt   = 16 // the lookup of this item restarts the server, mid-turn
	summaryHead = "The conversation history before this point was compacted"
	historyHead = "Conversation so far:\n"
)

// part is one part of a request message, as the test compares it.
type part struct {
	Text     string `json:",omitempty"`
	CallID   string `json:",omitempty"`
	CallName string `json:",omitempty"`
	CallArgs string `json:",omitempty"`
	ResultOf string `json:",omitempty"`
	Result   string `json:",omitempty"`
}

type message struct {
	Role  llms.ChatMessageType
	Parts []part
}

// sent is one model request as the model got it.
type sent struct {
	messages     []message
	tools        []string
	summary      string // the effective context's summary when the request was made
	compactionID string
}

// scriptedModel is the fake llms.Model. It records each request and answers
// from its end only, so every run gets the same answers: after tool results a
// text with the price of the first; to "Turn N: ..." a call of lookup (ID
// "call-N") unless N is a multiple of 3, which gets a text; for a multiple of
// 5 a second call (lookup of N+100, "call-N-b") comes with it.
type scriptedModel struct {
	mu      sync.Mutex
	records []*sent
	probe   func() (string, string) // nil in the plain run
}

func (m *scriptedModel) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, options...)
}

func (m *scriptedModel) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var opts llms.CallOptions
	for _, o := range options {
		o(&opts)
	}
	s := &sent{}
	for _, f := range opts.Functions {
		s.tools = append(s.tools, f.Name)
	}
	for _, mc := range messages {
		msg := message{Role: mc.Role}
		for _, p := range mc.Parts {
			switch v := p.(type) {
			case llms.TextContent:
				msg.Parts = append(msg.Parts, part{Text: v.Text})
			case llms.ToolCall:
				msg.Parts = append(msg.Parts, part{CallID: v.ID, CallName: v.FunctionCall.Name, CallArgs: v.FunctionCall.Arguments})
			case llms.ToolCallResponse:
				msg.Parts = append(msg.Parts, part{ResultOf: v.ToolCallID, Result: v.Content})
			default:
				return nil, fmt.Errorf("unexpected part %T", p)
			}
		}
		s.messages = append(s.messages, msg)
	}
	if m.probe != nil {
		s.summary, s.compactionID = m.probe()
	}
	m.mu.Lock()
	m.records = append(m.records, s)
	m.mu.Unlock()

	last := s.messages[len(s.messages)-1]
	if last.Role == llms.ChatMessageTypeTool {
		first := len(s.messages) - 1
		for first > 0 && s.messages[first-1].Role == llms.ChatMessageTypeTool {
			first--
		}
		var result struct{ Price int }
		if err := json.Unmarshal([]byte(s.messages[first].Parts[0].Result), &result); err != nil {
			return nil, err
		}
		return answer(fmt.Sprintf("That one costs %d euros; anything else?", result.Price)), nil
	}
	turn, err := strconv.Atoi(strings.TrimSuffix(strings.Fields(last.Parts[0].Text)[1], ":"))
	if err != nil {
		return nil, fmt.Errorf("not a turn: %q", last.Parts[0].Text)
	}
	if turn%3 == 0 {
		return answer(fmt.Sprintf("Happy to help with turn %d, no lookup needed.", turn)), nil
	}
	calls := []llms.ToolCall{{ID: fmt.Sprintf("call-%d", turn), Type: "function",
		FunctionCall: &llms.FunctionCall{Name: "lookup", Arguments: fmt.Sprintf(`{"item":%d}`, turn)}}}
	if turn%5 == 0 {
		calls = append(calls, llms.ToolCall{ID: fmt.Sprintf("call-%d-b", turn), Type: "function",
			FunctionCall: &llms.FunctionCall{Name: "lookup", Arguments: fmt.Sprintf(`{"item":%d}`, turn+100)}})
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{ToolCalls: calls, StopReason: "tool_calls"}}}, nil
}

func answer(text string) *llms.ContentResponse {
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: text, StopReason: "stop"}}}
}

// lookupTool is the agent's tool; onLookup runs inside it.
type lookupTool struct{ onLookup func(item int) }

func (lookupTool) Name() string        { return "lookup" }
func (lookupTool) Description() string { return "Looks an item up in the catalogue." }
func (l lookupTool) Call(ctx context.Context, input string) (string, error) {
	var args struct{ Item int }
	if err := json.Unmarshal([]byte(input), &args); err != nil {
		return "", err
	}
	if l.onLookup != nil {
		l.onLookup(args.Item)
	}
	b, err := json.Marshal(map[string]any{"item": args.Item, "price": 10 + args.Item,
		"notes": fmt.Sprintf("item %d in stock, aisle %d", args.Item, args.Item%7)})
	return string(b), err
}

// play runs the conversation through LangChainGo's agent executor: an
// OpenAI-functions agent with the scripted model, the lookup tool and a
// conversation buffer over history.
func play(t *testing.T, model *scriptedModel, history schema.ChatMessageHistory, onLookup func(int)) {
	t.Helper()
	agent := agents.NewOpenAIFunctionsAgent(model, []tools.Tool{lookupTool{onLookup}},
		agents.NewOpenAIOption().WithSystemMessage("You are the shop's clerk. Answer price questions with the lookup tool."),
		agents.NewOpenAIOption().WithExtraMessages([]prompts.MessageFormatter{
			prompts.NewSystemMessagePromptTemplate(historyHead+"{{.history}}", []string{"history"})}))
	executor := agents.NewExecutor(agent, agents.WithMaxIterations(5),
		agents.WithMemory(memory.NewConversationBuffer(memory.WithChatHistory(history))))
	for turn := 1; turn <= turns; turn++ {
		question := fmt.Sprintf("Turn %d: what does item %d cost, and is it in stock today?", turn, turn)
		if _, err := chains.Run(t.Context(), executor, question); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}
}

// checkPairs: in a request, each message with tool calls is followed by the
// results of exactly those calls, and each result answers a call of the
// message with calls before it.
func checkPairs(t *testing.T, which string, i int, messages []message) {
	t.Helper()
	for k := 0; k < len(messages); k++ {
		var calls []string
		for _, p := range messages[k].Parts {
			if p.CallID != "" {
				calls = append(calls, p.CallID)
			}
		}
		if messages[k].Role == llms.ChatMessageTypeTool {
			t.Errorf("%s request %d: the tool result in message %d answers no call before it", which, i, k)
			continue
		}
		if calls == nil {
			continue
		}
		var results []string
		for k+1 < len(messages) && messages[k+1].Role == llms.ChatMessageTypeTool {
			k++
			results = append(results, messages[k].Parts[0].ResultOf)
		}
		if !reflect.DeepEqual(calls, results) {
			t.Errorf("%s request %d: the calls %v are answered by %v", which, i, calls, results)
		}
	}
}

// TestAgentLoop plays 30 user turns (two of three call a tool, some two
// tools) through LangChainGo's agent executor with a scripted model, once
// with LangChainGo's in-memory chat history (plain) and once with
// ChatMessageHistory compacting through a summarizer on a small context
// window, the server restarted (same port and database) inside the tool call
// of turn 16. Checked request by request: before the first compaction the
// request equals the plain run's; from then on its history is ctxwarden's
// summary followed by the tail of the plain run's history (from a human's or,
// when ctxwarden cut inside a turn, an AI's message), everything else the
// plain run's; in every request of both runs each tool call is answered and
// each result answers a call. At the end the stored history equals the plain one.
func TestAgentLoop(t *testing.T) {
	srv := server(t)
	client := dial(t, srv)
	ctx := t.Context()

	plainModel, plainHistory := &scriptedModel{}, memory.NewChatMessageHistory()
	start := time.Now()
	play(t, plainModel, plainHistory, nil)
	plainTime := time.Since(start)

	var summaries []string
	summarize := func(ctx context.Context, prompt *ctxwardenv1.SummaryPrompt) (string, error) {
		if prompt.GetUser() == "" || prompt.GetMaxTokens() <= 0 {
			return "", fmt.Errorf("an empty summary prompt")
		}
		summaries = append(summaries, fmt.Sprintf("SUMMARY-%d", len(summaries)+1))
		return "## Goal\n" + summaries[len(summaries)-1] + ": the user asks for item prices, one item a turn.", nil
	}
	template := &ctxwardenv1.Session{Policy: &ctxwardenv1.ContextPolicy{
		ContextWindow: 640, ReserveTokens: 200, KeepRecentTokens: 160, Tokenizer: "heuristic"}}
	history, err := langchaingo.NewChatMessageHistory(client, "loop-"+token(t),
		langchaingo.WithTemplate(template), langchaingo.WithSummarizer(summarize))
	if err != nil {
		t.Fatal(err)
	}
	key := history.CtxwardenSessionID()
	model := &scriptedModel{probe: func() (string, string) {
		in, err := client.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: key})
		if status.Code(err) == codes.NotFound { // the first turn: the history is created when it is first written
			return "", ""
		} else if err != nil {
			t.Errorf("BuildModelInput: %v", err)
			return "", ""
		}
		if in.GetCompactionId() == "" {
			return "", ""
		}
		return in.GetMessages()[0].GetContent()[0].GetText().GetText(), in.GetCompactionId()
	}}
	restarted := false
	start = time.Now()
	play(t, model, history, func(item int) {
		if item == restartAt && !restarted {
			restarted = true
			if err := srv.Restart(); err != nil {
				t.Errorf("restart: %v", err)
			}
		}
	})
	t.Logf("30 turns: %v with LangChainGo's in-memory history, %v on ctxwarden (one restart included)", plainTime, time.Since(start))
	if !restarted || srv.Starts() < 2 {
		t.Fatal("the server was not restarted")
	}

	plain, ours := plainModel.records, model.records
	if len(ours) != len(plain) || len(plain) <= turns {
		t.Fatalf("%d model requests, the plain run %d", len(ours), len(plain))
	}
	first := -1
	for i, s := range ours {
		if s.compactionID != "" {
			first = i
			break
		}
	}
	compactions, err := client.ListCompactions(ctx, &ctxwardenv1.ListCompactionsRequest{SessionId: key})
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 || len(compactions.GetCompactions()) < 2 || len(summaries) < len(compactions.GetCompactions()) {
		t.Fatalf("first compacted request %d, %d compactions, %d summaries", first, len(compactions.GetCompactions()), len(summaries))
	}
	for i := range ours {
		checkPairs(t, "ctxwarden", i, ours[i].messages)
		checkPairs(t, "plain", i, plain[i].messages)
		if !reflect.DeepEqual(ours[i].tools, []string{"lookup"}) || len(ours[i].messages) != len(plain[i].messages) {
			t.Fatalf("request %d: tools %v, %d messages; the plain run's %d", i, ours[i].tools, len(ours[i].messages), len(plain[i].messages))
		}
		for k := range ours[i].messages {
			if k == 1 && i >= first { // the history message
				continue
			}
			if diff := cmp.Diff(plain[i].messages[k], ours[i].messages[k]); diff != "" {
				t.Errorf("request %d, message %d (-plain +ctxwarden):\n%s", i, k, diff)
			}
		}
		if i < first {
			continue
		}
		got, want := ours[i].messages[1].Parts[0].Text, plain[i].messages[1].Parts[0].Text
		head := historyHead + "Human: " + ours[i].summary
		tail, ok := strings.CutPrefix(got, head)
		if !ok || !strings.HasPrefix(ours[i].summary, summaryHead) || !strings.Contains(ours[i].summary, "SUMMARY-") {
			t.Errorf("request %d: the history does not start with the summary: %.300q", i, got)
		} else if len(got) >= len(want) || !strings.HasSuffix(want, tail) ||
			tail != "" && !strings.HasPrefix(tail, "\nHuman: Turn ") && !strings.HasPrefix(tail, "\nAI: ") {
			t.Errorf("request %d: after the summary, the history is not the plain one's tail: %q", i, tail)
		} else if strings.Contains(got, "Turn 1:") {
			t.Errorf("request %d: the history still has turn 1", i)
		}
	}
	t.Logf("%d requests, the first compacted is request %d, %d compactions; last history %d bytes (plain %d)",
		len(ours), first, len(compactions.GetCompactions()), len(ours[len(ours)-1].messages[1].Parts[0].Text),
		len(plain[len(plain)-1].messages[1].Parts[0].Text))

	// The stored history (all of it, not the effective context) is the plain one.
	var stored []llms.ChatMessage
	list := &ctxwardenv1.ListMessagesRequest{SessionId: key, PageSize: 1000}
	page, err := client.ListMessages(ctx, list)
	if err != nil || page.GetNextPageToken() != "" {
		t.Fatalf("ListMessages: %v (%q)", err, page.GetNextPageToken())
	}
	for _, m := range page.GetMessages() {
		stored = append(stored, langchaingo.FromMessage(m))
	}
	want, _ := plainHistory.Messages(ctx)
	if len(want) != 2*turns {
		t.Fatalf("the plain history has %d messages", len(want))
	}
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Errorf("stored history (-plain +ctxwarden):\n%s", diff)
	}
}
