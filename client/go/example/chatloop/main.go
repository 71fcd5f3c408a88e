// Command chatloop is a tool loop over OpenAI Chat Completions that moves JSON
// only: ctxwarden renders each request body's messages and tools, stores what
// the model returned and reads its tool calls out of it. Its tools, read and
// grep, work on the files under the current directory.
//
//	go run . "What does setup.py do?"
//
//	CTXWARDEN_TARGET   ctxwarden server (default 127.0.0.1:50051, plaintext)
//	CTXWARDEN_API_KEY  API key, when the server requires one
//	OPENAI_BASE_URL    default https://api.openai.com/v1
//	OPENAI_API_KEY     the provider's key; OPENAI_MODEL default gpt-4o
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

func main() {
	if err := run(context.Background(), strings.Join(os.Args[1:], " "), os.Stdout); err != nil {
		log.Fatalf("%v (reason %q)", err, ctxwarden.ErrorReason(err))
	}
}

func run(ctx context.Context, question string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	target, baseURL, model := getenv("CTXWARDEN_TARGET", ctxwarden.DefaultTarget),
		getenv("OPENAI_BASE_URL", "https://api.openai.com/v1"), getenv("OPENAI_MODEL", "gpt-4o")
	var opts []ctxwarden.Option
	if key := os.Getenv("CTXWARDEN_API_KEY"); key != "" {
		// Plaintext to a server on loopback; over a network use WithTransportCredentials and WithAPIKey.
		opts = append(opts, ctxwarden.WithInsecureAPIKey(key))
	}
	client, err := ctxwarden.Dial(ctx, target, opts...)
	if err != nil {
		return err
	}
	defer client.Close()

	session, err := client.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: &ctxwardenv1.Session{
		SystemPrompt: "You are a careful coding agent. Use the tools to read the project before answering.",
		Tools: []*ctxwardenv1.ToolDefinition{
			{Name: "read", Description: "Read a file", ParametersJson: `{"type":"object",` +
				`"properties":{"path":{"type":"string"}},"required":["path"]}`},
			{Name: "grep", Description: "List the lines of the files under path that contain pattern",
				ParametersJson: `{"type":"object","properties":{"pattern":{"type":"string"},` +
					`"path":{"type":"string"}},"required":["pattern"]}`},
		},
	}})
	if err != nil {
		return fmt.Errorf("CreateSession: %w", err)
	}
	sid, chat := session.GetSessionId(), ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT
	if _, err := client.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{
		SessionId: sid, Messages: []*ctxwardenv1.Message{ctxwarden.User(question)}}); err != nil {
		return fmt.Errorf("AppendMessages: %w", err)
	}

	inputs := ctxwarden.NewInputCache(1) // each request body resumes the last: only what is new crosses the wire
	for turn := 1; turn <= 10; turn++ {
		in, err := inputs.Build(ctx, client, &ctxwardenv1.BuildModelInputRequest{SessionId: sid, Format: chat})
		if err != nil {
			return fmt.Errorf("BuildModelInput: %w", err)
		}
		body, err := ctxwarden.RequestBody(in, map[string]interface{}{"model": model, "stream": false})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, "POST", baseURL+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header = http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + os.Getenv("OPENAI_API_KEY")}}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // a real agent appends ctxwarden.FailedAssistant(err.Error()) and asks RollbackTurn
		}
		output, err := ctxwarden.ReadResponse(resp) // the body; streamed: the SSE data payloads as a JSON array
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("model call: %s: %s", resp.Status, output)
		}
		stored, err := client.AppendModelOutput(ctx, ctxwarden.ModelOutput(sid, chat, output))
		if err != nil {
			return fmt.Errorf("AppendModelOutput: %w", err)
		}
		answer := stored.GetMessages()[0] // with its stop reason, usage and tool calls
		fmt.Fprintf(out, "model call %d: stop_reason=%s output_tokens=%d\n",
			turn, answer.GetStopReason(), answer.GetUsage().GetOutputTokens())
		calls := ctxwarden.ToolCalls(answer)
		if len(calls) == 0 {
			for _, block := range answer.GetContent() {
				if text := block.GetText(); text != nil {
					fmt.Fprintf(out, "answer: %s\n", text.GetText())
				}
			}
			return nil
		}
		var results []map[string]string // the tool results in the provider's format
		for _, call := range calls {
			result := runTool(call.GetName(), call.GetArgumentsJson())
			fmt.Fprintf(out, "tool %s %s: %d bytes\n", call.GetName(), call.GetArgumentsJson(), len(result))
			results = append(results, map[string]string{"role": "tool", "tool_call_id": call.GetId(), "content": result})
		}
		items, err := json.Marshal(results)
		if err != nil {
			return err
		}
		if _, err := client.AppendModelOutput(ctx, ctxwarden.ModelItems(sid, chat, items)); err != nil {
			return fmt.Errorf("AppendModelOutput(tool results): %w", err)
		}
	}
	return fmt.Errorf("no answer after 10 model calls")
}

// runTool runs read or grep on the files under the current directory; a
// failure goes to the model as the result.
func runTool(name, argumentsJSON string) string {
	var args struct{ Path, Pattern string }
	if err := json.Unmarshal([]byte(argumentsJSON), &args); err != nil {
		return "error: " + err.Error()
	}
	path := filepath.Clean(args.Path)
	if !filepath.IsLocal(path) {
		return "error: the path must be under the current directory"
	}
	switch name {
	case "read":
		b, err := os.ReadFile(path)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	case "grep":
		var lines []string
		err := filepath.WalkDir(path, func(file string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(file)
			for i, line := range strings.Split(string(b), "\n") {
				if err == nil && strings.Contains(line, args.Pattern) {
					lines = append(lines, fmt.Sprintf("%s:%d:%s", file, i+1, line))
				}
			}
			return nil
		})
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("error: unknown tool %q", name)
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
