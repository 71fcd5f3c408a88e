// Command quickstart drives one ctxwarden session: the user's question, the
// model input, a tool call and its result, a failed model call rolled back,
// the answer. The model is played by fixed messages; the calls are real.
//
//	CTXWARDEN_TARGET   server address (default 127.0.0.1:50051)
//	CTXWARDEN_API_KEY  API key, when the server requires one (--api-keys-file)
//	CTXWARDEN_TLS_CA   CA certificate (PEM) of a TLS server; without it the
//	                   connection is plaintext, for a server on loopback
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/grpc/credentials"
)

func main() {
	target := os.Getenv("CTXWARDEN_TARGET")
	if target == "" {
		target = ctxwarden.DefaultTarget
	}
	var opts []ctxwarden.Option
	apiKey := os.Getenv("CTXWARDEN_API_KEY")
	if ca := os.Getenv("CTXWARDEN_TLS_CA"); ca != "" {
		tlsCreds, err := credentials.NewClientTLSFromFile(ca, "")
		if err != nil {
			log.Fatal(err)
		}
		opts = append(opts, ctxwarden.WithTransportCredentials(tlsCreds))
		if apiKey != "" {
			opts = append(opts, ctxwarden.WithAPIKey(apiKey)) // sent over TLS only
		}
	} else if apiKey != "" {
		opts = append(opts, ctxwarden.WithInsecureAPIKey(apiKey)) // plaintext: loopback only
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ctxwarden.Dial(ctx, target, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	check := func(what string, err error) {
		if err != nil {
			client.Close()
			log.Fatalf("%s: %v (reason %q)", what, err, ctxwarden.ErrorReason(err))
		}
	}

	// 1. A session with a system prompt and the tools the model may call.
	session, err := client.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{
		Session: &ctxwardenv1.Session{
			SystemPrompt: "You are a careful coding agent. Read files before answering.",
			Tools: []*ctxwardenv1.ToolDefinition{{
				Name:           "read",
				Description:    "Read a file",
				ParametersJson: `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
			}},
		},
	})
	check("CreateSession", err)
	sid := session.GetSessionId()
	appendMsgs := func(msgs ...*ctxwardenv1.Message) *ctxwardenv1.AppendMessagesResponse {
		resp, err := client.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: sid, Messages: msgs})
		check("AppendMessages", err)
		return resp
	}

	// 2. The user asks; ctxwarden says what to send to the model.
	appendMsgs(ctxwarden.User("What does setup.py do?"))
	in, err := client.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	check("BuildModelInput", err)
	fmt.Printf("model input: %d messages, %d tokens\n", len(in.GetMessages()), in.GetTokens().GetTotalTokens())

	// 3. The model calls a tool: the agent runs each call and records its result.
	answer := ctxwarden.Assistant("Let me look.", ctxwarden.ToolCall("call-1", "read", `{"path":"setup.py"}`))
	appendMsgs(answer)
	for _, call := range ctxwarden.ToolCalls(answer) {
		fmt.Printf("tool call: %s %s\n", call.GetName(), call.GetArgumentsJson())
		appendMsgs(ctxwarden.ToolResult(call.GetId(), "from setuptools import setup\nsetup(name=\"demo\")\n"))
	}

	// 4. The next model call fails: record it, then ask ctxwarden what to do.
	appendMsgs(ctxwarden.FailedAssistant("429 rate limit"))
	rb, err := client.RollbackTurn(ctx, &ctxwardenv1.RollbackTurnRequest{SessionId: sid})
	check("RollbackTurn", err)
	fmt.Printf("rollback: %s\n", rb.GetAction())
	// A real agent sleeps rb.GetRetryAfter().AsDuration() and calls the model again.

	// 5. The retried call answers.
	last := appendMsgs(ctxwarden.Assistant("setup.py packages demo with setuptools."))
	in, err = client.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	check("BuildModelInput", err)
	fmt.Printf("model input: %d messages, last seq %d\n", len(in.GetMessages()), last.GetLastSeq())
	for _, m := range in.GetMessages() {
		fmt.Println(" ", m.GetRole())
	}
}
