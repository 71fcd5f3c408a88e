package ctxwarden

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

// ModelOutput returns the AppendModelOutput request that appends one model
// call's answer in the provider format: responseJSON is the response body as
// the provider returned it or, for a streamed call, the JSON array of its event
// payloads (ReadResponse gives either).
func ModelOutput(sessionID string, format ctxwardenv1.ModelInputFormat, responseJSON []byte) *ctxwardenv1.AppendModelOutputRequest {
	return &ctxwardenv1.AppendModelOutputRequest{
		SessionId: sessionID,
		Format:    format,
		Output:    &ctxwardenv1.AppendModelOutputRequest_ResponseJson{ResponseJson: string(responseJSON)},
	}
}

// ModelItems returns the AppendModelOutput request that appends itemsJSON, a
// JSON array of input items in the provider format: what the agent would put
// into the next request itself, e.g. its tool results (OpenAI Chat
// {"role":"tool","tool_call_id":...,"content":...} messages).
func ModelItems(sessionID string, format ctxwardenv1.ModelInputFormat, itemsJSON []byte) *ctxwardenv1.AppendModelOutputRequest {
	return &ctxwardenv1.AppendModelOutputRequest{
		SessionId: sessionID,
		Format:    format,
		Output:    &ctxwardenv1.AppendModelOutputRequest_ItemsJson{ItemsJson: string(itemsJSON)},
	}
}

// RequestBody returns the body to POST to the provider: in.rendered_json (a
// BuildModelInput asked with a format) with the agent's own parameters added
// ("model", "stream", "max_tokens", ...). The rendered members are kept byte
// for byte and first, the parameters follow in key order. A parameter that
// the rendered input already has ("messages", "tools", ...) is an error.
func RequestBody(in *ctxwardenv1.ModelInput, params map[string]interface{}) ([]byte, error) {
	rendered := bytes.TrimSpace([]byte(in.GetRenderedJson()))
	if len(rendered) == 0 {
		return nil, errors.New("ctxwarden: the model input has no rendered_json (set BuildModelInputRequest.format)")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(rendered, &members); err != nil {
		return nil, fmt.Errorf("ctxwarden: rendered_json is not a JSON object: %w", err)
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		if _, ok := members[k]; ok {
			return nil, fmt.Errorf("ctxwarden: parameter %q is already in rendered_json", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.Write(rendered[:len(rendered)-1]) // without the closing brace
	sep := len(members) > 0
	for _, k := range keys {
		if sep {
			b.WriteByte(',')
		}
		sep = true
		if err := writeJSON(&b, k); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := writeJSON(&b, params[k]); err != nil {
			return nil, fmt.Errorf("ctxwarden: parameter %q: %w", k, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeJSON writes v as compact JSON without HTML escaping.
func writeJSON(b *bytes.Buffer, v interface{}) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// ReadResponse reads a provider's HTTP response into what ModelOutput takes:
// for a Content-Type of text/event-stream the JSON array of the event
// payloads (ReadSSE), else the body as is. It does not look at the status
// code: check it first (an error body is not a model output). It does not
// close the body.
func ReadResponse(resp *http.Response) ([]byte, error) {
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == "text/event-stream" {
		return ReadSSE(resp.Body)
	}
	return io.ReadAll(resp.Body)
}

// MaxSSELine bounds one line of a stream read by ReadSSE (64 MiB, the
// server's message size limit).
const MaxSSELine = 64 << 20

// ReadSSE reads a server-sent-events stream (the body of a streamed model
// call) and returns the JSON array of its events' data payloads, in order:
// the `data:` lines of each event (joined by newlines when an event has
// several), each of which must be JSON. Other fields (`event:`, `id:`) and
// comments are skipped; a `[DONE]` payload (OpenAI Chat's end marker) ends
// the stream. An event that the stream does not finish (no blank line after
// it) is dropped, as the SSE specification says. On a read error ReadSSE
// returns the payloads read so far together with the error: appended, they
// record the interrupted call (e.g. OpenAI Chat's stop reason ABORTED).
func ReadSSE(r io.Reader) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxSSELine)
	sc.Split(scanSSELines)
	out := []byte{'['}
	n := 0
	var data []byte
	pending := false // the current event has data
	first := true
	for sc.Scan() {
		line := sc.Bytes()
		if first {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			first = false
		}
		if len(line) == 0 { // end of an event
			if !pending {
				continue
			}
			if bytes.Equal(data, []byte("[DONE]")) {
				break
			}
			if !json.Valid(data) {
				return append(out, ']'), fmt.Errorf("ctxwarden: event %d of the stream: data is not JSON: %.80q", n, data)
			}
			if n > 0 {
				out = append(out, ',')
			}
			out = append(out, data...)
			n++
			data, pending = data[:0], false
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], bytes.TrimPrefix(line[i+1:], []byte(" "))
		}
		if string(field) != "data" { // a comment (empty field), event:, id:, retry:
			continue
		}
		if pending {
			data = append(data, '\n')
		}
		data = append(data, value...)
		pending = true
	}
	out = append(out, ']')
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("ctxwarden: reading the stream: %w", err)
	}
	return out, nil
}

// scanSSELines splits at CRLF, LF or CR, the line ends SSE allows.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // a LF may follow
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
