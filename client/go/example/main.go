// Command example runs two agent flows against a ctxwarden server: the
// ctxwarden-native one (agentloop.RunExample) and a tool loop over OpenAI
// Chat Completions that never converts messages by hand (agentloop.ToolLoop),
// by default against an in-process stand-in for the API.
//
//	go run ./example -target 127.0.0.1:50051   (or CTXWARDEN_TARGET=host:port)
//	go run ./example -openai-base-url https://api.openai.com/v1 -model gpt-4o   (key in OPENAI_API_KEY)
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/example/agentloop"
	"github.com/ctxwarden/ctxwarden/client/go/internal/fakeopenai"
)

func main() {
	def := os.Getenv("CTXWARDEN_TARGET")
	if def == "" {
		def = ctxwarden.DefaultTarget
	}
	target := flag.String("target", def, "ctxwarden server address (env CTXWARDEN_TARGET)")
	baseURL := flag.String("openai-base-url", "", "Chat Completions API base URL for the tool loop (default: an in-process stand-in); key in OPENAI_API_KEY")
	model := flag.String("model", "gpt-4o", "model of the tool loop")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ctxwarden.Dial(ctx, *target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	defer client.Close()
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "example: %v (reason %q)\n", err, ctxwarden.ErrorReason(err))
		client.Close()
		os.Exit(1)
	}

	if err := agentloop.RunExample(ctx, client, os.Stdout); err != nil {
		fail(err)
	}

	loop := &agentloop.ToolLoop{BaseURL: *baseURL, APIKey: os.Getenv("OPENAI_API_KEY"), Model: *model,
		Stream: func(n int) bool { return n >= 2 }} // the first call plain, the others streamed
	if loop.BaseURL == "" {
		api := httptest.NewServer(&fakeopenai.Provider{})
		defer api.Close()
		loop.BaseURL = api.URL + "/v1"
	}
	_, answer, err := loop.Run(ctx, client, "What does setup.py do, and does it declare any dependencies?", os.Stdout)
	if err != nil {
		fail(err)
	}
	for _, b := range answer.GetContent() {
		if t := b.GetText(); t != nil {
			fmt.Printf("answer: %s\n", t.GetText())
		}
	}
}
