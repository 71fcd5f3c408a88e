package adk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/adk"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/adk/v2/agent"
	"google.golang.org/adk/v2/agent/llmagent"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/plugin"
	"google.golang.org/adk/v2/runner"
	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/tool"
	"google.golang.org/adk/v2/tool/functiontool"
	"google.golang.org/genai"
)

const (
	turns       = 30
	restartAt   = 16 // the lookup of this item restarts the server, mid-invocation
	app, user   = "shop", "u1"
	sessionName = "s1"
	summaryHead = "The conversation history before this point was compacted"
)

// sent is one model request as the model got it.
type sent struct {
	contents     []any // JSON of the request's contents
	system       string
	tools        []string
	ctxwarden    []*ctxwardenv1.Message // the effective context when the request was made
	compactionID string
}

// scriptedLLM is the fake model.LLM: it records each request and answers from
// its last content only, so every run gets the same answers: a function
// response gets a text; "Turn N: ..." a call of lookup(item=N) (with the ID
// "call-N" for an even N, none for an odd one, so ADK makes an "adk-" ID)
// unless N is a multiple of 3, which gets a text; for a multiple of 5 a second
// call, lookup(item=N+100), comes with it (parallel calls: one event answers both).
type scriptedLLM struct {
	mu      sync.Mutex
	records []*sent
	probe   func() ([]*ctxwardenv1.Message, string) // nil in the plain run
}

func (m *scriptedLLM) Name() string { return "scripted" }

func (m *scriptedLLM) GenerateContent(ctx context.Context, req *model.LLMRequest, stream bool) iter.Seq2[*model.LLMResponse, error] {
	return func(yield func(*model.LLMResponse, error) bool) {
		yield(m.answer(req))
	}
}

func (m *scriptedLLM) answer(req *model.LLMRequest) (*model.LLMResponse, error) {
	b, err := json.Marshal(req.Contents)
	if err != nil {
		return nil, err
	}
	s := &sent{}
	if err := json.Unmarshal(b, &s.contents); err != nil {
		return nil, err
	}
	if req.Config != nil && req.Config.SystemInstruction != nil {
		for _, p := range req.Config.SystemInstruction.Parts {
			s.system += p.Text
		}
	}
	for name := range req.Tools {
		s.tools = append(s.tools, name)
	}
	sort.Strings(s.tools)
	if m.probe != nil {
		s.ctxwarden, s.compactionID = m.probe()
	}
	m.mu.Lock()
	m.records = append(m.records, s)
	m.mu.Unlock()

	last := req.Contents[len(req.Contents)-1].Parts[0]
	var part *genai.Part
	if last.FunctionResponse != nil {
		part = genai.NewPartFromText(fmt.Sprintf("That one costs %v euros; anything else?", last.FunctionResponse.Response["price"]))
	} else {
		turn, err := strconv.Atoi(strings.TrimSuffix(strings.Fields(last.Text)[1], ":"))
		if err != nil {
			return nil, fmt.Errorf("not a turn: %q", last.Text)
		}
		if turn%3 != 0 {
			part = genai.NewPartFromFunctionCall("lookup", map[string]any{"item": turn})
			if turn%2 == 0 {
				part.FunctionCall.ID = fmt.Sprintf("call-%d", turn)
			}
			if turn%5 == 0 { // and a second call, in parallel
				second := genai.NewPartFromFunctionCall("lookup", map[string]any{"item": turn + 100})
				if turn%2 == 0 {
					second.FunctionCall.ID = fmt.Sprintf("call-%d-b", turn)
				}
				return &model.LLMResponse{Content: genai.NewContentFromParts([]*genai.Part{part, second}, genai.RoleModel), TurnComplete: true}, nil
			}
		} else {
			part = genai.NewPartFromText(fmt.Sprintf("Happy to help with turn %d, no lookup needed.", turn))
		}
	}
	return &model.LLMResponse{Content: genai.NewContentFromParts([]*genai.Part{part}, genai.RoleModel), TurnComplete: true}, nil
}

type lookupArgs struct {
	Item int `json:"item"`
}

// play runs the conversation through ADK's runner: an llmagent with the
// scripted model and the lookup tool. onLookup runs inside the tool.
func play(t *testing.T, llm *scriptedLLM, service session.Service, plugins []*plugin.Plugin, onLookup func(item int)) {
	t.Helper()
	ctx := t.Context()
	lookup, err := functiontool.New(functiontool.Config{Name: "lookup", Description: "Looks an item up in the catalogue."},
		func(tc agent.Context, args lookupArgs) (map[string]any, error) {
			if onLookup != nil {
				onLookup(args.Item)
			}
			// State of every scope: session, user, app, and temp (never stored).
			for key, value := range map[string]any{"last_item": args.Item, "user:last_item": args.Item,
				"app:lookups": args.Item, "temp:scratch": "x"} {
				if err := tc.State().Set(key, value); err != nil {
					return nil, err
				}
			}
			return map[string]any{"item": args.Item, "price": 10 + args.Item,
				"notes": fmt.Sprintf("item %d in stock, aisle %d", args.Item, args.Item%7)}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	clerk, err := llmagent.New(llmagent.Config{
		Name:        "clerk",
		Model:       llm,
		Instruction: "You are the shop's clerk. Answer price questions with the lookup tool.",
		Tools:       []tool.Tool{lookup},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(runner.Config{AppName: app, Agent: clerk, SessionService: service,
		PluginConfig: runner.PluginConfig{Plugins: plugins}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := service.Create(ctx, &session.CreateRequest{AppName: app, UserID: user, SessionID: sessionName,
		State: map[string]any{"user:name": "Ada", "app:currency": "EUR", "temp:draft": "x"}}); err != nil {
		t.Fatal(err)
	}
	for turn := 1; turn <= turns; turn++ {
		text := fmt.Sprintf("Turn %d: what does item %d cost, and is it in stock today?", turn, turn)
		for _, err := range r.Run(ctx, user, sessionName, genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{}) {
			if err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
		}
	}
}

// checkPairs: in a request, every function call is answered by the next
// content and every function response answers the content before it (by
// name, and by ID where the model sees one).
func checkPairs(t *testing.T, which string, i int, contents []any) {
	t.Helper()
	calls := func(content any, kind string) []string {
		var out []string
		parts, _ := content.(map[string]any)["parts"].([]any)
		for _, p := range parts {
			if v, ok := p.(map[string]any)[kind].(map[string]any); ok {
				id, _ := v["id"].(string)
				out = append(out, fmt.Sprint(v["name"], "#", id))
			}
		}
		return out
	}
	for k, content := range contents {
		if c := calls(content, "functionCall"); c != nil {
			if k+1 >= len(contents) || !reflect.DeepEqual(calls(contents[k+1], "functionResponse"), c) {
				t.Errorf("%s request %d: the call %v of content %d is not answered by the next content", which, i, c, k)
			}
		}
		if r := calls(content, "functionResponse"); r != nil {
			if k == 0 || !reflect.DeepEqual(calls(contents[k-1], "functionCall"), r) {
				t.Errorf("%s request %d: the response %v of content %d does not answer the content before it", which, i, r, k)
			}
		}
	}
}

func text(m *ctxwardenv1.Message) []string {
	var out []string
	for _, b := range m.GetContent() {
		if t := b.GetText(); t != nil {
			out = append(out, t.GetText())
		}
	}
	return out
}

// checkCompacted: the request is ctxwarden's summary, then exactly the tail of
// the plain request, one content per message of the effective context.
func checkCompacted(t *testing.T, i int, ours, plain *sent) {
	t.Helper()
	head := ours.contents[0].(map[string]any)
	headText, _ := head["parts"].([]any)[0].(map[string]any)["text"].(string)
	if head["role"] != "user" || !strings.HasPrefix(headText, summaryHead) || !strings.Contains(headText, "<summary>") ||
		!strings.Contains(headText, "SUMMARY-") {
		t.Errorf("request %d: the first content is not the agent's summary: %v", i, head)
	}
	if len(ours.ctxwarden) == 0 || !reflect.DeepEqual(text(ours.ctxwarden[0]), []string{headText}) ||
		ours.ctxwarden[0].GetMetadata()["ctxwarden.summary"] != ours.compactionID {
		t.Errorf("request %d: the first content is not the effective context's summary message", i)
	}
	kept := ours.contents[1:]
	if len(ours.contents) >= len(plain.contents) ||
		!reflect.DeepEqual(kept, plain.contents[len(plain.contents)-len(kept):]) {
		t.Errorf("request %d: after the summary, the request is not the tail of the plain run's (%d contents vs %d)",
			i, len(ours.contents), len(plain.contents))
	}
	// One content per event: the messages of an event that answers several
	// calls (marked with EventPartKey) go with the first.
	var events [][]*ctxwardenv1.Message
	for _, m := range ours.ctxwarden[1:] {
		if m.GetMetadata()[adk.EventPartKey] != "" && len(events) > 0 {
			events[len(events)-1] = append(events[len(events)-1], m)
		} else {
			events = append(events, []*ctxwardenv1.Message{m})
		}
	}
	if len(kept) != len(events) {
		t.Errorf("request %d: %d contents after the summary for %d events of the effective context", i, len(kept), len(events))
		return
	}
	for k, content := range kept {
		c := content.(map[string]any)
		role := "user"
		if events[k][0].GetRole() == ctxwardenv1.Role_ROLE_ASSISTANT {
			role = "model"
		}
		if c["role"] != role {
			t.Errorf("request %d, content %d: role %v, the message's %s", i, k+1, c["role"], events[k][0].GetRole())
		}
		var texts, want []string
		for _, p := range c["parts"].([]any) {
			part := p.(map[string]any)
			if r, ok := part["functionResponse"].(map[string]any); ok {
				b, _ := json.Marshal(r["response"])
				texts = append(texts, string(b))
			} else if s, ok := part["text"].(string); ok {
				texts = append(texts, s)
			}
		}
		for _, m := range events[k] {
			want = append(want, text(m)...)
		}
		if !reflect.DeepEqual(texts, want) && !(len(texts) == 0 && want == nil) {
			t.Errorf("request %d, content %d: %q, the messages hold %q", i, k+1, texts, want)
		}
	}
}

// normalized is an event as JSON without what differs between two runs
// (event and invocation IDs, timestamps, ADK's own function-call IDs).
func normalized(t *testing.T, e *session.Event) map[string]any {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "id")
	delete(m, "timestamp")
	delete(m, "invocationId")
	if content, ok := m["content"].(map[string]any); ok {
		for _, p := range content["parts"].([]any) {
			for _, kind := range []string{"functionCall", "functionResponse"} {
				if v, ok := p.(map[string]any)[kind].(map[string]any); ok && strings.HasPrefix(fmt.Sprint(v["id"]), "adk-") {
					v["id"] = "adk-*"
				}
			}
		}
	}
	if actions, ok := m["actions"].(map[string]any); ok { // ADK's in-memory service keeps temp: keys, its database service does not
		if delta, ok := actions["stateDelta"].(map[string]any); ok {
			for k := range delta {
				if strings.HasPrefix(k, session.KeyPrefixTemp) {
					delete(delta, k)
				}
			}
		}
	}
	if ids, ok := m["longRunningToolIds"]; ok {
		m["longRunningToolIds"] = len(ids.([]any))
	}
	return m
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunnerLoop plays 30 user turns (two of three call a tool) through ADK's
// runner with a scripted model, once on ADK's in-memory session service
// (plain) and once on SessionService with ContextPlugin compacting through
// a summarizer on a small context window, the server restarted (same port and
// database) inside the tool call of turn 16. Checked request by request:
// before the first compaction the contents equal the plain run's; from then on
// they are ctxwarden's summary followed by the tail of the plain request, one
// content per message of the effective context; in every request of both runs
// each function call is followed by its response and each response preceded
// by its call; system instruction and tools are the plain run's. At the end
// the stored events and state equal the plain run's.
func TestRunnerLoop(t *testing.T) {
	srv := server(t)
	client := dial(t, srv)
	ctx := t.Context()
	run := token(t)

	plainLLM := &scriptedLLM{}
	plainService := session.InMemoryService()
	start := time.Now()
	play(t, plainLLM, plainService, nil, nil)
	plainTime := time.Since(start)

	template := &ctxwardenv1.Session{Policy: &ctxwardenv1.ContextPolicy{
		ContextWindow: 640, ReserveTokens: 200, KeepRecentTokens: 160, Tokenizer: "heuristic"}}
	service, err := adk.NewSessionService(client, adk.WithTemplate(template), adk.WithNamespace("loop-"+run))
	if err != nil {
		t.Fatal(err)
	}
	key := service.Key(app, user, sessionName)
	var summaries []string
	summarize := func(ctx context.Context, prompt *ctxwardenv1.SummaryPrompt) (string, error) {
		if prompt.GetUser() == "" || prompt.GetMaxTokens() <= 0 {
			return "", fmt.Errorf("an empty summary prompt")
		}
		summaries = append(summaries, fmt.Sprintf("SUMMARY-%d", len(summaries)+1))
		return "## Goal\n" + summaries[len(summaries)-1] + ": the user asks for item prices, one item a turn.", nil
	}
	contextPlugin := adk.NewContextPlugin(service, adk.WithSummarizer(summarize))
	llm := &scriptedLLM{probe: func() ([]*ctxwardenv1.Message, string) {
		in, err := client.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: key})
		if err != nil {
			t.Errorf("BuildModelInput: %v", err)
			return nil, ""
		}
		return in.GetMessages(), in.GetCompactionId()
	}}
	restarted := false
	onLookup := func(item int) {
		if item == restartAt && !restarted {
			restarted = true
			if err := srv.Restart(); err != nil {
				t.Errorf("restart: %v", err)
			}
		}
	}
	start = time.Now()
	play(t, llm, service, []*plugin.Plugin{contextPlugin.Plugin()}, onLookup)
	t.Logf("30 turns: %v on ADK's in-memory service, %v on ctxwarden (one restart included)", plainTime, time.Since(start))
	if !restarted {
		t.Fatal("the server was not restarted")
	}

	plain, ours := plainLLM.records, llm.records
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
		checkPairs(t, "ctxwarden", i, ours[i].contents)
		checkPairs(t, "plain", i, plain[i].contents)
		if ours[i].system != plain[0].system || !reflect.DeepEqual(ours[i].tools, []string{"lookup"}) ||
			plain[i].system != plain[0].system || !reflect.DeepEqual(plain[i].tools, ours[i].tools) {
			t.Errorf("request %d: system %q, tools %v; the plain run's %q, %v", i, ours[i].system, ours[i].tools, plain[i].system, plain[i].tools)
		}
		if i < first {
			if jsonOf(t, ours[i].contents) != jsonOf(t, plain[i].contents) {
				t.Errorf("request %d differs from the plain run's before any compaction", i)
			}
		} else {
			checkCompacted(t, i, ours[i], plain[i])
		}
	}
	t.Logf("%d requests, the first compacted is request %d, %d compactions, last request %d contents (plain %d)",
		len(ours), first, len(compactions.GetCompactions()), len(ours[len(ours)-1].contents), len(plain[len(plain)-1].contents))

	// The stored session equals the plain run's: events and state.
	get := &session.GetRequest{AppName: app, UserID: user, SessionID: sessionName}
	stored, err := service.Get(ctx, get)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plainService.Get(ctx, get)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := stored.Session.Events().Len(), want.Session.Events().Len(); got != w {
		t.Fatalf("%d stored events, the plain run has %d", got, w)
	}
	for i := range stored.Session.Events().Len() {
		got, w := normalized(t, stored.Session.Events().At(i)), normalized(t, want.Session.Events().At(i))
		if jsonOf(t, got) != jsonOf(t, w) {
			t.Errorf("event %d:\n got %s\nwant %s", i, jsonOf(t, got), jsonOf(t, w))
		}
	}
	gotState, wantState := map[string]any{}, map[string]any{}
	for k, v := range stored.Session.State().All() {
		gotState[k] = v
	}
	for k, v := range want.Session.State().All() {
		if !strings.HasPrefix(k, session.KeyPrefixTemp) { // kept by ADK's in-memory service only
			wantState[k] = v
		}
	}
	if jsonOf(t, gotState) != jsonOf(t, wantState) || gotState["user:last_item"] != float64(29) || gotState["temp:scratch"] != nil {
		t.Errorf("state %s, the plain run's %s", jsonOf(t, gotState), jsonOf(t, wantState))
	}
	if n := srv.Starts(); n < 2 {
		t.Errorf("%d server processes, want a restart", n)
	}
}

// TestRunnerToolOutputStubs: with keep_tool_results=2 the older tool outputs
// (those of parallel calls too) reach the model as ctxwarden's stubs
// ({"result": stub}); everything else in each request is the plain run's.
func TestRunnerToolOutputStubs(t *testing.T) {
	client := dial(t, server(t))
	plainLLM := &scriptedLLM{}
	play(t, plainLLM, session.InMemoryService(), nil, nil)

	template := &ctxwardenv1.Session{Policy: &ctxwardenv1.ContextPolicy{KeepToolResults: 2, Tokenizer: "heuristic"}}
	service, err := adk.NewSessionService(client, adk.WithTemplate(template), adk.WithNamespace("stubs-"+token(t)))
	if err != nil {
		t.Fatal(err)
	}
	llm := &scriptedLLM{}
	play(t, llm, service, []*plugin.Plugin{adk.NewContextPlugin(service).Plugin()}, nil)

	plain, ours := plainLLM.records, llm.records
	if len(ours) != len(plain) {
		t.Fatalf("%d model requests, the plain run %d", len(ours), len(plain))
	}
	stubbed := 0
	for i := range ours {
		checkPairs(t, "ctxwarden", i, ours[i].contents)
		if len(ours[i].contents) != len(plain[i].contents) {
			t.Fatalf("request %d: %d contents, the plain run %d", i, len(ours[i].contents), len(plain[i].contents))
		}
		// Every function response but the newest two is ctxwarden's stub;
		// everything else is the plain run's.
		total := strings.Count(jsonOf(t, plain[i].contents), `"functionResponse"`)
		seen := 0
		for k := range ours[i].contents {
			gotParts := ours[i].contents[k].(map[string]any)["parts"].([]any)
			wantParts := plain[i].contents[k].(map[string]any)["parts"].([]any)
			if len(gotParts) != len(wantParts) {
				t.Fatalf("request %d, content %d: %d parts, the plain run's %d", i, k, len(gotParts), len(wantParts))
			}
			for p := range gotParts {
				got, want := jsonOf(t, gotParts[p]), jsonOf(t, wantParts[p])
				response, isResponse := gotParts[p].(map[string]any)["functionResponse"].(map[string]any)
				if isResponse {
					seen++
				}
				if !isResponse || seen > total-2 {
					if got != want {
						t.Errorf("request %d, content %d, part %d: %s, the plain run's %s", i, k, p, got, want)
					}
					continue
				}
				stub, _ := response["response"].(map[string]any)["result"].(string)
				if response["name"] != "lookup" || !strings.HasPrefix(stub, "[ctxwarden: older tool output omitted") {
					t.Errorf("request %d, content %d, part %d: not a stub: %s", i, k, p, got)
				}
				stubbed++
			}
		}
	}
	if stubbed <= turns {
		t.Errorf("%d stubbed outputs in all requests", stubbed)
	}
	t.Logf("%d requests, %d stubbed outputs", len(ours), stubbed)
}
