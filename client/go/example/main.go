// Command example runs a minimal agent loop against a ctxwarden server.
//
//	go run ./example -target 127.0.0.1:50051   (or CTXWARDEN_TARGET=host:port)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/example/agentloop"
)

func main() {
	def := os.Getenv("CTXWARDEN_TARGET")
	if def == "" {
		def = ctxwarden.DefaultTarget
	}
	target := flag.String("target", def, "ctxwarden server address (env CTXWARDEN_TARGET)")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ctxwarden.Dial(ctx, *target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	defer client.Close()

	if err := agentloop.RunExample(ctx, client, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "example: %v (reason %q)\n", err, ctxwarden.ErrorReason(err))
		client.Close()
		os.Exit(1)
	}
}
