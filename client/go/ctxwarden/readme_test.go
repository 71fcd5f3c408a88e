package ctxwarden_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

// readmeTurn is the README's one-turn snippet ("A tool loop in the provider's
// format"), verbatim, so that the compiler checks it (TestReadmeExcerpts in
// example/agentloop checks that the README block is this text). Its errors are
// left unchecked, as in the README.
func readmeTurn(ctx context.Context, client *ctxwarden.Client, sid, apiKey, callID, result string) (*ctxwardenv1.AppendMessagesResponse, error) {
	chat := ctxwardenv1.ModelInputFormat_MODEL_INPUT_FORMAT_OPENAI_CHAT
	in, err := client.BuildModelInput(ctx, &ctxwardenv1.BuildModelInputRequest{SessionId: sid, Format: chat})
	body, err := ctxwarden.RequestBody(in, map[string]interface{}{"model": "gpt-4o", "stream": false})
	req, err := http.NewRequestWithContext(ctx, "POST", "https://api.openai.com/v1/chat/completions", bytes.NewReader(body))
	req.Header = http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + apiKey}}
	resp, err := http.DefaultClient.Do(req)     // then check resp.StatusCode
	output, err := ctxwarden.ReadResponse(resp) // the body; streamed: the SSE data payloads as a JSON array
	stored, err := client.AppendModelOutput(ctx, ctxwarden.ModelOutput(sid, chat, output))
	// stored.Messages[0] has the stop reason, the usage and the tool calls to run; their results:
	items, err := json.Marshal([]map[string]string{{"role": "tool", "tool_call_id": callID, "content": result}})
	_, err = client.AppendModelOutput(ctx, ctxwarden.ModelItems(sid, chat, items))
	return stored, err
}

var _ = readmeTurn
