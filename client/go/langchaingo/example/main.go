// Command example runs a LangChainGo agent whose chat history ctxwarden
// keeps: an OpenAI-functions agent with one tool, LangChainGo's executor and a
// conversation buffer over ChatMessageHistory. With OPENAI_API_KEY set the
// model is OpenAI's; without it a stand-in that calls the tool once per
// question plays the model (the calls to ctxwarden are real).
//
//	CTXWARDEN_TARGET  ctxwarden server (default 127.0.0.1:50051, plaintext)
//	OPENAI_API_KEY    OpenAI API key; OPENAI_MODEL default gpt-4o
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/langchaingo"
	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
	"github.com/tmc/langchaingo/memory"
	"github.com/tmc/langchaingo/prompts"
	"github.com/tmc/langchaingo/tools"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatalf("%v (reason %q)", err, ctxwarden.ErrorReason(err))
	}
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

	// The thread's history in ctxwarden: the memory loads its effective
	// context, compacted by the server's summariser when needed.
	thread := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	history, err := langchaingo.NewChatMessageHistory(client, thread, langchaingo.WithAutoCompact())
	if err != nil {
		return err
	}

	var model llms.Model = standIn{}
	if os.Getenv("OPENAI_API_KEY") != "" {
		if model, err = openai.New(); err != nil { // OPENAI_MODEL, OPENAI_BASE_URL too
			return err
		}
	}
	agent := agents.NewOpenAIFunctionsAgent(model, []tools.Tool{lookup{}},
		agents.NewOpenAIOption().WithSystemMessage("You are the shop's clerk. Answer price questions with the lookup tool."),
		agents.NewOpenAIOption().WithExtraMessages([]prompts.MessageFormatter{
			prompts.NewSystemMessagePromptTemplate("Conversation so far:\n{{.history}}", []string{"history"})}))
	executor := agents.NewExecutor(agent, agents.WithMemory(memory.NewConversationBuffer(memory.WithChatHistory(history))))

	for _, question := range []string{"What does item 7 cost?", "And item 12?"} {
		answer, err := chains.Run(ctx, executor, question)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "user: %s\nclerk: %s\n", question, answer)
	}

	// What the next model call gets: the effective context of the thread.
	messages, err := history.Messages(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ctxwarden session %s holds %d messages:\n",
		regexp.MustCompile(`demo-\d+`).ReplaceAllString(history.CtxwardenSessionID(), "demo-N"), len(messages))
	for _, m := range messages {
		fmt.Fprintf(out, "  %s: %s\n", m.GetType(), m.GetContent())
	}
	return nil
}

// lookup is the agent's tool.
type lookup struct{}

func (lookup) Name() string        { return "lookup" }
func (lookup) Description() string { return `Looks an item up in the catalogue; input {"item": N}.` }
func (lookup) Call(ctx context.Context, input string) (string, error) {
	var args struct{ Item int }
	if err := json.Unmarshal([]byte(input), &args); err != nil {
		return "", err
	}
	return fmt.Sprintf(`{"item":%d,"price":%d}`, args.Item, 10+args.Item), nil
}

// standIn plays the model without an API: a question about item N gets a
// lookup call, the tool's answer a sentence with the price.
type standIn struct{}

func (s standIn) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, s, prompt, options...)
}

func (standIn) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	last := messages[len(messages)-1]
	if r, ok := last.Parts[0].(llms.ToolCallResponse); ok {
		var result struct{ Item, Price int }
		if err := json.Unmarshal([]byte(r.Content), &result); err != nil {
			return nil, err
		}
		return &llms.ContentResponse{Choices: []*llms.ContentChoice{{
			Content: fmt.Sprintf("Item %d costs %d euros.", result.Item, result.Price)}}}, nil
	}
	item := regexp.MustCompile(`\d+`).FindString(fmt.Sprint(last.Parts[0]))
	call := llms.ToolCall{ID: "call-" + item, Type: "function",
		FunctionCall: &llms.FunctionCall{Name: "lookup", Arguments: `{"item":` + item + `}`}}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{ToolCalls: []llms.ToolCall{call}}}}, nil
}
