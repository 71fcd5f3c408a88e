// Command hello is the repository README's Go program: dial ctxwarden with an API
// key, create a session, append the user's message, build the model input.
//
//	CTXWARDEN_TARGET   server address (default 127.0.0.1:50051)
//	CTXWARDEN_API_KEY  API key, when the server requires one (--api-keys-file)
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

func main() {
	target := os.Getenv("CTXWARDEN_TARGET")
	if target == "" {
		target = ctxwarden.DefaultTarget
	}
	var opts []ctxwarden.Option
	if key := os.Getenv("CTXWARDEN_API_KEY"); key != "" {
		opts = append(opts, ctxwarden.WithInsecureAPIKey(key)) // plaintext: loopback only; WithAPIKey over TLS
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ctxwarden.Dial(ctx, target, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	session, err := client.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{
		Session: &ctxwardenv1.Session{SystemPrompt: "You are a terse assistant."},
	})
	if err != nil {
		log.Fatalf("CreateSession: %v (reason %q)", err, ctxwarden.ErrorReason(err))
	}
	sid := session.GetSessionId()
	_, err = client.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{
		SessionId: sid, Messages: []*ctxwardenv1.Message{ctxwarden.User("What is ctxwarden?")},
	})
	if err != nil {
		log.Fatalf("AppendMessages: %v", err)
	}
	input, err := client.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid})
	if err != nil {
		log.Fatalf("BuildModelInput: %v", err)
	}
	fmt.Printf("session %s: %d message(s), %d tokens\n", sid, len(input.GetMessages()), input.GetTokens().GetTotalTokens())
}
