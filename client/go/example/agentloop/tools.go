package agentloop

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
)

// The agent's own tools: read and grep over a small in-memory project. They
// are the agent's business, not ctxwarden's: RunToolLoop hands them the
// tool calls ctxwarden read from the model's answer.

// Tools are the tool definitions the tool loop's session offers the model.
var Tools = []*ctxwardenv1.ToolDefinition{
	{
		Name:           "read",
		Description:    "Read a file of the project",
		ParametersJson: `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
	},
	{
		Name:           "grep",
		Description:    "List the lines of the project's files under path that contain pattern",
		ParametersJson: `{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}`,
	},
}

// project is the file tree the tools see.
var project = map[string]string{
	"setup.py":  setupPy,
	"README.md": "# demo\n\nA small example library.\n\nRequires Python 3.9 or later.\n",
}

// RunTool runs the tool name with its arguments (a JSON object text) and
// returns its output; a failure is reported in the output, as models expect.
func RunTool(name, argumentsJSON string) string {
	var args struct {
		Path    string `json:"path"`
		Pattern string `json:"pattern"`
	}
	if err := json.Unmarshal([]byte(argumentsJSON), &args); err != nil {
		return fmt.Sprintf("error: bad arguments: %v", err)
	}
	switch name {
	case "read":
		text, ok := project[args.Path]
		if !ok {
			return fmt.Sprintf("error: %s: no such file", args.Path)
		}
		return text
	case "grep":
		dir := strings.TrimSuffix(strings.TrimPrefix(args.Path, "./"), "/")
		var paths []string
		for p := range project {
			if dir == "" || dir == "." || p == dir || strings.HasPrefix(p, dir+"/") {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		var out []string
		for _, p := range paths {
			for i, line := range strings.Split(project[p], "\n") {
				if strings.Contains(line, args.Pattern) {
					out = append(out, fmt.Sprintf("%s:%d:%s", p, i+1, line))
				}
			}
		}
		if len(out) == 0 {
			return "no matches"
		}
		return strings.Join(out, "\n")
	}
	return fmt.Sprintf("error: unknown tool %q", name)
}
