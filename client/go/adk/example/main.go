// Command example runs a Google ADK agent whose sessions ctxwarden stores: an
// llmagent with one tool, ADK's runner, SessionService and ContextPlugin. With
// GOOGLE_API_KEY set the model is Gemini; without it a stand-in that calls
// the tool once per question plays the model (the calls to ctxwarden are real).
//
//	CTXWARDEN_TARGET  ctxwarden server (default 127.0.0.1:50051, plaintext)
//	GOOGLE_API_KEY    Gemini API key; GEMINI_MODEL default gemini-2.5-flash
package main

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log"
	"os"
	"regexp"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/adk"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/adk/v2/agent"
	"google.golang.org/adk/v2/agent/llmagent"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/model/gemini"
	"google.golang.org/adk/v2/plugin"
	"google.golang.org/adk/v2/runner"
	"google.golang.org/adk/v2/tool"
	"google.golang.org/adk/v2/tool/functiontool"
	"google.golang.org/genai"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatalf("%v (reason %q)", err, ctxwarden.ErrorReason(err))
	}
}

type lookupArgs struct {
	Item int `json:"item"`
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	target := os.Getenv("CTXWARDEN_TARGET")
	if target == "" {
		target = ctxwarden.DefaultTarget
	}
	client, err := ctxwarden.Dial(ctx, target)
	if err != nil {
		return err
	}
	defer client.Close()

	// ADK's sessions in ctxwarden; each model request follows ctxwarden's
	// effective context, compacted by the server's summariser when needed.
	service, err := adk.NewSessionService(client, adk.WithTemplate(&ctxwardenv1.Session{Model: "gemini-2.5-flash"}))
	if err != nil {
		return err
	}
	contextPlugin := adk.NewContextPlugin(service)

	lookup, err := functiontool.New(functiontool.Config{Name: "lookup", Description: "Looks an item up in the catalogue."},
		func(ctx agent.Context, args lookupArgs) (map[string]any, error) {
			if err := ctx.State().Set("user:last_item", args.Item); err != nil { // the user's state, in every session
				return nil, err
			}
			return map[string]any{"item": args.Item, "price": 10 + args.Item}, nil
		})
	if err != nil {
		return err
	}
	var llm model.LLM = standIn{}
	if key := os.Getenv("GOOGLE_API_KEY"); key != "" {
		name := os.Getenv("GEMINI_MODEL")
		if name == "" {
			name = "gemini-2.5-flash"
		}
		if llm, err = gemini.NewModel(ctx, name, &genai.ClientConfig{APIKey: key}); err != nil {
			return err
		}
	}
	clerk, err := llmagent.New(llmagent.Config{
		Name: "clerk", Model: llm, Tools: []tool.Tool{lookup},
		Instruction: "You are the shop's clerk. Answer price questions with the lookup tool.",
	})
	if err != nil {
		return err
	}
	r, err := runner.New(runner.Config{
		AppName: "shop", Agent: clerk, SessionService: service, AutoCreateSession: true,
		PluginConfig: runner.PluginConfig{Plugins: []*plugin.Plugin{contextPlugin.Plugin()}},
	})
	if err != nil {
		return err
	}

	sessionID := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	for _, question := range []string{"What does item 7 cost?", "And item 12?"} {
		fmt.Fprintf(out, "user: %s\n", question)
		for event, err := range r.Run(ctx, "ada", sessionID, genai.NewContentFromText(question, genai.RoleUser), agent.RunConfig{}) {
			if err != nil {
				return err
			}
			if event.Content == nil {
				continue // e.g. an event that only changes state
			}
			for _, p := range event.Content.Parts {
				switch {
				case p.FunctionCall != nil:
					fmt.Fprintf(out, "%s: call %s %v\n", event.Author, p.FunctionCall.Name, p.FunctionCall.Args)
				case p.FunctionResponse != nil:
					fmt.Fprintf(out, "%s: %s returned %v\n", event.Author, p.FunctionResponse.Name, p.FunctionResponse.Response)
				case p.Text != "":
					fmt.Fprintf(out, "%s: %s\n", event.Author, p.Text)
				}
			}
		}
	}

	// What ctxwarden holds: one message per event, the state in its three scopes.
	key := service.Key("shop", "ada", sessionID)
	stored, err := client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: key})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ctxwarden session %s: last_seq %d, user state %v\n",
		regexp.MustCompile(`demo-\d+`).ReplaceAllString(key, "demo-N"), stored.GetLastSeq(), stored.GetUserState().AsMap())
	return nil
}

// standIn plays the model without an API: a question about item N gets a
// lookup call, the tool's answer a sentence with the price.
type standIn struct{}

func (standIn) Name() string { return "stand-in" }

func (standIn) GenerateContent(ctx context.Context, req *model.LLMRequest, stream bool) iter.Seq2[*model.LLMResponse, error] {
	return func(yield func(*model.LLMResponse, error) bool) {
		last := req.Contents[len(req.Contents)-1].Parts[0]
		var part *genai.Part
		if r := last.FunctionResponse; r != nil {
			part = genai.NewPartFromText(fmt.Sprintf("Item %v costs %v euros.", r.Response["item"], r.Response["price"]))
		} else {
			var item int
			fmt.Sscanf(regexp.MustCompile(`\d+`).FindString(last.Text), "%d", &item)
			part = genai.NewPartFromFunctionCall("lookup", map[string]any{"item": item})
		}
		yield(&model.LLMResponse{Content: genai.NewContentFromParts([]*genai.Part{part}, genai.RoleModel)}, nil)
	}
}
