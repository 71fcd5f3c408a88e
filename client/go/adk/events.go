package adk

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/adk/v2/session"
)

// EventEnvelopeKey is the message metadata key under which EventToMessages
// keeps the rest of an event (see EventToMessages). The Python adapter keeps
// its own events (Python ADK's JSON) under "ctxwarden.adk_event": each
// adapter reads only its own envelopes.
const EventEnvelopeKey = "ctxwarden.adk_go_event"

// EventPartKey marks the second and later messages of an event that answers
// several function calls (see EventToMessages): "INDEX:EVENT_ID", INDEX the
// position of its function response in the event (from 1; the first message,
// with the envelope, holds response 0).
const EventPartKey = "ctxwarden.adk_go_event_part"

// EventToMessages returns the ctxwarden messages of one ADK event, the
// mapping of the Python adapter (ctxwarden_client.integrations.adk_events):
// one message, except for an event that answers several function calls at
// once, which is one tool result per call. The event is stored as ADK Go
// encodes it (encoding/json), split in two: what ctxwarden models goes into
// content blocks, the rest of the event (author, IDs, actions, timestamp,
// usage, other parts) is a JSON envelope in the first message's metadata under
// EventEnvelopeKey, with which MessagesToEvent gives back an equal event.
//
//   - An event by the user ("user" author) is a USER message, any other an
//     ASSISTANT message.
//   - A part that is only text is a text block; in an ASSISTANT message a part
//     that is only a function call with an ID is a tool call block; a part that
//     is only inline image data ("image/..." MIME type) is an image block.
//   - An event whose parts are all function responses with an ID (ADK's answer
//     to the model's function calls, one part per call) is one TOOL_RESULT
//     message per part: tool_call_id the ID, tool_name the function's name,
//     the response object as JSON text; the second and later ones are marked
//     with EventPartKey. (The Python adapter stores an event with several
//     responses as one history-only message: ctxwarden then answers those
//     calls with synthetic results in its view.)
//   - Other parts (thoughts, file data, code execution, function calls and
//     responses without an ID) stay whole in the envelope.
//   - An event with nothing for the model (only a state delta, only thoughts)
//     is a history-only message: stored and listed, never in a model input.
func EventToMessages(e *session.Event) ([]*ctxwardenv1.Message, error) {
	data, err := decodeObject(e)
	if err != nil {
		return nil, fmt.Errorf("ctxwarden adk: encode event %q: %w", e.ID, err)
	}
	msg := &ctxwardenv1.Message{Role: ctxwardenv1.Role_ROLE_ASSISTANT}
	if e.Author == "user" {
		msg.Role = ctxwardenv1.Role_ROLE_USER
	}
	messages := []*ctxwardenv1.Message{msg}
	content, _ := data["content"].(map[string]any)
	parts, _ := content["parts"].([]any)
	if responses := functionResponses(parts); responses != nil && (len(responses) == 1 || e.ID != "") {
		template := make([]any, len(responses))
		for i, resp := range responses {
			m := msg
			if i > 0 {
				m = &ctxwardenv1.Message{Metadata: map[string]string{EventPartKey: fmt.Sprintf("%d:%s", i, e.ID)}}
				messages = append(messages, m)
			}
			m.Role = ctxwardenv1.Role_ROLE_TOOL_RESULT
			m.ToolCallId = resp["id"].(string)
			m.ToolName, _ = resp["name"].(string)
			response, has := resp["response"]
			if !has {
				response = map[string]any{}
			}
			text, err := encodeJSON(response)
			if err != nil {
				return nil, err
			}
			m.Content = []*ctxwardenv1.ContentBlock{textBlock(text)}
			template[i] = map[string]any{"$": "response", "rest": without(resp, "response"), "has": has}
		}
		content["parts"] = template
	} else if len(parts) > 0 {
		template := make([]any, 0, len(parts))
		for _, p := range parts {
			part, _ := p.(map[string]any)
			block, rest, err := partBlock(part, msg.Role)
			if err != nil {
				return nil, err
			}
			if block == nil {
				template = append(template, map[string]any{"$": "part", "part": p})
				continue
			}
			msg.Content = append(msg.Content, block)
			template = append(template, rest)
		}
		content["parts"] = template
	}
	if len(msg.Content) == 0 {
		msg.Visibility = ctxwardenv1.MessageVisibility_MESSAGE_VISIBILITY_HISTORY_ONLY
	}
	envelope, err := encodeJSON(data)
	if err != nil {
		return nil, err
	}
	if msg.Metadata == nil {
		msg.Metadata = map[string]string{}
	}
	msg.Metadata[EventEnvelopeKey] = envelope
	return messages, nil
}

// functionResponses returns the function responses of parts when every part
// is only a function response with an ID; else nil.
func functionResponses(parts []any) []map[string]any {
	var out []map[string]any
	for _, p := range parts {
		part, _ := p.(map[string]any)
		resp, _ := part["functionResponse"].(map[string]any)
		if len(part) != 1 || resp == nil {
			return nil
		}
		if id, _ := resp["id"].(string); id == "" {
			return nil
		}
		out = append(out, resp)
	}
	return out
}

// partBlock returns the block of a part and the template entry that stands
// for it, or a nil block when the part stays whole in the envelope.
func partBlock(part map[string]any, role ctxwardenv1.Role) (*ctxwardenv1.ContentBlock, map[string]any, error) {
	if len(part) != 1 {
		return nil, nil, nil
	}
	if text, ok := part["text"].(string); ok {
		return textBlock(text), map[string]any{"$": "text"}, nil
	}
	if call, ok := part["functionCall"].(map[string]any); ok && role == ctxwardenv1.Role_ROLE_ASSISTANT {
		id, _ := call["id"].(string)
		name, _ := call["name"].(string)
		args, hasArgs := call["args"]
		if _, isObject := args.(map[string]any); id == "" || name == "" || hasArgs && !isObject {
			return nil, nil, nil
		}
		if !hasArgs {
			args = map[string]any{}
		}
		argsJSON, err := encodeJSON(args)
		if err != nil {
			return nil, nil, err
		}
		block := &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_ToolCall{
			ToolCall: &ctxwardenv1.ToolCall{Id: id, Name: name, ArgumentsJson: argsJSON},
		}}
		return block, map[string]any{"$": "call", "rest": without(call, "id", "name", "args"), "args": hasArgs}, nil
	}
	if blob, ok := part["inlineData"].(map[string]any); ok {
		mime, _ := blob["mimeType"].(string)
		data, _ := blob["data"].(string)
		raw, err := base64.StdEncoding.DecodeString(data)
		if !strings.HasPrefix(mime, "image/") || err != nil || len(raw) == 0 ||
			base64.StdEncoding.EncodeToString(raw) != data {
			return nil, nil, nil
		}
		block := &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Image{
			Image: &ctxwardenv1.ImageContent{MimeType: mime, Data: raw},
		}}
		return block, map[string]any{"$": "image", "rest": without(blob, "data")}, nil
	}
	return nil, nil, nil
}

// MessagesToEvent returns the event that EventToMessages made messages of
// (with the content as the messages hold it): the message with the envelope,
// followed by the ones marked with its event's ID (EventPartKey), if any. It
// returns nil and no error for a message without an envelope (one ADK did not
// write, e.g. a compaction summary, or one the Python adapter wrote).
func MessagesToEvent(messages ...*ctxwardenv1.Message) (*session.Event, error) {
	if len(messages) == 0 {
		return nil, nil
	}
	head := messages[0]
	raw := head.GetMetadata()[EventEnvelopeKey]
	if raw == "" {
		return nil, nil
	}
	data, err := decodeJSON([]byte(raw))
	if err != nil {
		return nil, fmt.Errorf("ctxwarden adk: the envelope of message %d: %w", head.GetSeq(), err)
	}
	var blocks []*ctxwardenv1.ContentBlock
	for _, m := range messages {
		blocks = append(blocks, m.GetContent()...)
	}
	if content, ok := data["content"].(map[string]any); ok {
		if template, ok := content["parts"].([]any); ok && len(template) > 0 {
			parts, err := fillParts(template, blocks)
			if err != nil {
				return nil, fmt.Errorf("ctxwarden adk: message %d: %w", head.GetSeq(), err)
			}
			content["parts"] = parts
		}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	e := new(session.Event)
	if err := json.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("ctxwarden adk: message %d: decode the event: %w", head.GetSeq(), err)
	}
	return e, nil
}

// EventsOf returns the events of messages listed in seq order: each message
// with an envelope together with the messages of the same event after it.
// Messages without an envelope or event part are left out (a part whose
// first message is not among messages too).
func EventsOf(messages []*ctxwardenv1.Message) ([]*session.Event, error) {
	var events []*session.Event
	for i := 0; i < len(messages); {
		if messages[i].GetMetadata()[EventEnvelopeKey] == "" {
			i++
			continue
		}
		id := eventID(messages[i])
		j := i + 1
		for j < len(messages) && partOf(messages[j]) == id && id != "" {
			j++
		}
		e, err := MessagesToEvent(messages[i:j]...)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
		i = j
	}
	return events, nil
}

// partOf returns the event ID of a message marked with EventPartKey ("" for
// another message), and its index.
func partOf(m *ctxwardenv1.Message) string {
	id, _ := partIndex(m)
	return id
}

func partIndex(m *ctxwardenv1.Message) (string, int) {
	index, id, ok := strings.Cut(m.GetMetadata()[EventPartKey], ":")
	if !ok {
		return "", 0
	}
	n, err := strconv.Atoi(index)
	if err != nil || n <= 0 {
		return "", 0
	}
	return id, n
}

func fillParts(template []any, blocks []*ctxwardenv1.ContentBlock) ([]any, error) {
	next := 0
	block := func() (*ctxwardenv1.ContentBlock, error) {
		if next >= len(blocks) {
			return nil, fmt.Errorf("the envelope names more parts than the messages have blocks")
		}
		next++
		return blocks[next-1], nil
	}
	parts := make([]any, 0, len(template))
	for _, t := range template {
		entry, _ := t.(map[string]any)
		switch entry["$"] {
		case "part":
			parts = append(parts, entry["part"])
		case "text":
			b, err := block()
			if err != nil {
				return nil, err
			}
			parts = append(parts, map[string]any{"text": b.GetText().GetText()})
		case "response":
			b, err := block()
			if err != nil {
				return nil, err
			}
			response := copyObject(entry["rest"])
			if has, _ := entry["has"].(bool); has {
				value, err := decodeAny(b.GetText().GetText())
				if err != nil {
					return nil, fmt.Errorf("the function response is not JSON: %w", err)
				}
				response["response"] = value
			}
			parts = append(parts, map[string]any{"functionResponse": response})
		case "call":
			b, err := block()
			if err != nil {
				return nil, err
			}
			call := b.GetToolCall()
			value := copyObject(entry["rest"])
			value["id"], value["name"] = call.GetId(), call.GetName()
			if has, _ := entry["args"].(bool); has {
				args := call.GetArgumentsJson()
				if args == "" {
					args = "{}"
				}
				decoded, err := decodeAny(args)
				if err != nil {
					return nil, fmt.Errorf("the arguments of call %q are not JSON: %w", call.GetId(), err)
				}
				value["args"] = decoded
			}
			parts = append(parts, map[string]any{"functionCall": value})
		case "image":
			b, err := block()
			if err != nil {
				return nil, err
			}
			blob := copyObject(entry["rest"])
			blob["data"] = base64.StdEncoding.EncodeToString(b.GetImage().GetData())
			parts = append(parts, map[string]any{"inlineData": blob})
		default:
			return nil, fmt.Errorf("unknown part template %v", entry["$"])
		}
	}
	return parts, nil
}

// eventID returns the ID of the event in a message's envelope ("" without one).
func eventID(m *ctxwardenv1.Message) string {
	raw := m.GetMetadata()[EventEnvelopeKey]
	if raw == "" {
		return ""
	}
	var head struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(raw), &head) != nil {
		return ""
	}
	return head.ID
}

func textBlock(text string) *ctxwardenv1.ContentBlock {
	return &ctxwardenv1.ContentBlock{Block: &ctxwardenv1.ContentBlock_Text{Text: &ctxwardenv1.TextContent{Text: text}}}
}

func without(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

func copyObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return without(m)
}

// decodeObject returns v as a JSON object with its numbers as json.Number,
// so they are written back exactly as encoding/json wrote them.
func decodeObject(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(b)
}

func decodeJSON(b []byte) (map[string]any, error) {
	var out map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeAny(text string) (any, error) {
	var out any
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return out, nil
}

// encodeJSON is compact JSON without HTML escaping.
func encodeJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
