// pi's own SessionManager writes session files, and opens files to build their context.
//
//   node pi_sessions.mjs write DIR      writes one session file per scenario into DIR
//   node pi_sessions.mjs context FILE…  opens each file
//
// Both print a JSON array, one item per file: {name, file, entries, pathEntries, leaf, messages,
// llm, leaves, marks}. leaf is the entry pi opens the file at (the last one). messages is buildSessionContext().messages (pi's AgentMessages), llm is what
// pi sends the model: convertToLlm(messages) without errored or aborted assistant messages
// (pi-ai's transformMessages skips those when it builds a provider request). leaves has one
// item per leaf of the file's tree, {id, llm}: the file opened again and branched to the leaf
// (SessionManager.branch), its context as llm above. marks names entries of a scenario.
import { convertToLlm, SessionManager } from "@mariozechner/pi-coding-agent";

let clock = Date.UTC(2026, 0, 2, 3, 4, 5);
const tick = () => (clock += 1000);

const usage = (input, output) => ({
	input,
	output,
	cacheRead: 0,
	cacheWrite: 0,
	totalTokens: input + output,
	cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
});
const user = (content) => ({ role: "user", content, timestamp: tick() });
const assistant = (content, stopReason = "stop", extra = {}) => ({
	role: "assistant",
	content,
	api: "anthropic-messages",
	provider: "anthropic",
	model: "claude-sonnet-4-5",
	usage: usage(1000 + content.length * 10, 50),
	stopReason,
	timestamp: tick(),
	...extra,
});
const toolResult = (id, name, text, isError = false) => ({
	role: "toolResult",
	toolCallId: id,
	toolName: name,
	content: [{ type: "text", text }],
	details: { lines: text.split("\n").length },
	isError,
	timestamp: tick(),
});
const text = (t) => ({ type: "text", text: t });
const call = (id, name, args) => ({ type: "toolCall", id, name, arguments: args });
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

function turn(sm, n) {
	const first = sm.appendMessage(user(`Please look at file ${n}.py and explain it.`));
	sm.appendMessage(
		assistant(
			[
				{ type: "thinking", thinking: `I should read ${n}.py`, thinkingSignature: `sig-${n}` },
				text(`Reading ${n}.py.`),
				call(`call_${n}`, "read", { path: `${n}.py`, limit: 200 }),
			],
			"toolUse",
		),
	);
	sm.appendMessage(toolResult(`call_${n}`, "read", `def f${n}():\n    return ${n}\n`.repeat(3)));
	sm.appendMessage(assistant([text(`File ${n}.py defines f${n}, which returns ${n}.`)]));
	return first;
}

const scenarios = {
	tools(sm) {
		sm.appendModelChange("anthropic", "claude-sonnet-4-5");
		sm.appendThinkingLevelChange("medium");
		sm.appendMessage(user("What does setup.py do?"));
		sm.appendMessage(assistant([text("Let me look."), call("c1", "read", { path: "setup.py" })], "toolUse"));
		sm.appendMessage(toolResult("c1", "read", "from setuptools import setup\nsetup(name='demo')"));
		const answer = sm.appendMessage(assistant([text("It installs the package `demo`.")]));
		sm.appendLabelChange(answer, "answer");
		sm.appendSessionInfo("setup questions");
		sm.appendMessage(user([text("And this image?"), { type: "image", data: PNG, mimeType: "image/png" }]));
		sm.appendMessage(assistant([], "error", { errorMessage: "429 rate limited" }));
		sm.appendMessage(assistant([text("A single pixel.")]));
	},
	compaction(sm) {
		const firsts = [];
		for (let n = 0; n < 6; n++) firsts.push(turn(sm, n));
		sm.appendCompaction("The user asked about files 0-3; each defines one function.", firsts[4], 12345, {
			readFiles: ["0.py", "1.py", "2.py", "3.py"],
			modifiedFiles: [],
		});
		for (let n = 6; n < 9; n++) firsts.push(turn(sm, n));
		sm.appendCompaction("Files 0-7 were read and explained.", firsts[8], 23456, undefined, true);
		turn(sm, 9);
	},
	branches(sm) {
		const firsts = [];
		for (let n = 0; n < 3; n++) firsts.push(turn(sm, n));
		const fork = sm.getLeafId();
		turn(sm, 10);
		turn(sm, 11);
		sm.branch(fork);
		turn(sm, 20);
		const abandoned = sm.getLeafId();
		sm.branchWithSummary(fork, "Tried reading 20.py; it was not needed.");
		turn(sm, 30);
		sm.branch(abandoned);
		sm.branchWithSummary(firsts[1], "Went back to file 1.");
		turn(sm, 40);
	},
	// Branches of every kind: off the main line before and after a compaction (and right
	// before it), off other branches (forks of forks) before and after a branch's own
	// compaction, a compaction at the branch point, branch summaries, a second root.
	tree(sm, mark) {
		const firsts = [];
		for (let n = 0; n < 4; n++) firsts.push(turn(sm, n));
		const endT1 = sm.getBranch()[7].id;
		const endT3 = sm.getLeafId();
		const c1 = sm.appendCompaction("Files 0 and 1 were read.", firsts[2], 5000, {
			readFiles: ["0.py", "1.py"],
			modifiedFiles: [],
		});
		mark("c1", c1);
		turn(sm, 4);
		const endT4 = sm.getLeafId();
		turn(sm, 5);
		const endT5 = sm.getLeafId();
		turn(sm, 6);
		const endT6 = sm.getLeafId();

		sm.branch(endT1); // before the compaction
		turn(sm, 100);
		mark("early", sm.getLeafId());
		sm.branch(endT3); // the entry just before the compaction: not in force there
		turn(sm, 101);
		mark("beforeCompaction", sm.getLeafId());
		sm.branch(c1); // the compaction itself: in force
		turn(sm, 102);
		mark("afterCompaction", sm.getLeafId());
		sm.branch(endT5);
		turn(sm, 103);
		const end103 = sm.getLeafId();
		turn(sm, 104);
		mark("late", sm.getLeafId());
		sm.branch(end103); // off the branch "late": a fork of a fork
		sm.appendThinkingLevelChange("high");
		turn(sm, 105);
		sm.appendLabelChange(end103, "retry");
		mark("offLate", sm.getLeafId());
		sm.branch(endT4); // a branch with a compaction of its own
		turn(sm, 106);
		const end106 = sm.getLeafId();
		const first107 = turn(sm, 107);
		const c2 = sm.appendCompaction("Files 4, 106 and 107 were read.", first107, 7000);
		turn(sm, 108);
		mark("ownCompaction", sm.getLeafId());
		sm.branchWithSummary(c2, "Tried file 108; not needed."); // after that compaction
		turn(sm, 109);
		mark("afterForkCompaction", sm.getLeafId());
		sm.branch(end106); // before it
		turn(sm, 110);
		mark("beforeForkCompaction", sm.getLeafId());
		sm.branch(endT6); // a compaction right at the branch point
		sm.appendCompaction("Files 0-6 were read.", firsts[0], 9000);
		turn(sm, 111);
		mark("compactionAtBranchPoint", sm.getLeafId());
		sm.resetLeaf(); // a second root: shares nothing
		turn(sm, 112);
		mark("newRoot", sm.getLeafId());
		sm.branchWithSummary(firsts[0], "Started over after the first question.");
		turn(sm, 113);
		mark("offRoot", sm.getLeafId());

		sm.branch(endT6); // the main line goes on: the file's last entry
		turn(sm, 7);
		mark("main", sm.getLeafId());
	},
	extras(sm) {
		turn(sm, 0);
		sm.appendCustomMessageEntry("reminder", "Remember: tests first.", true, { from: "ext" });
		sm.appendCustomMessageEntry("snippet", [text("A snippet:"), text("x = 1")], false);
		sm.appendMessage({
			role: "bashExecution",
			command: "ls",
			output: "a.py\nb.py",
			exitCode: 0,
			cancelled: false,
			truncated: false,
			timestamp: tick(),
		});
		sm.appendMessage({
			role: "bashExecution",
			command: "secret",
			output: "hidden",
			exitCode: 1,
			cancelled: false,
			truncated: false,
			excludeFromContext: true,
			timestamp: tick(),
		});
		sm.appendMessage({ role: "custom", customType: "note", content: "An injected note.", display: true, timestamp: tick() });
		sm.appendCustomEntry("state", { counter: 3 });
		turn(sm, 1);
	},
};

const toLlm = (messages) =>
	convertToLlm(messages).filter(
		(m) => !(m.role === "assistant" && (m.stopReason === "error" || m.stopReason === "aborted")),
	);

function leaves(file) {
	const sm = SessionManager.open(file);
	const entries = sm.getEntries();
	const parents = new Set(entries.map((e) => e.parentId));
	return entries
		.filter((e) => !parents.has(e.id))
		.map((e) => {
			sm.branch(e.id);
			return { id: e.id, llm: toLlm(sm.buildSessionContext().messages) };
		});
}

function describe(name, file, sm, marks = {}) {
	const ctx = sm.buildSessionContext();
	return {
		name,
		file,
		entries: sm.getEntries().length,
		pathEntries: sm.getBranch().length,
		leaf: sm.getLeafId(),
		messages: ctx.messages,
		llm: toLlm(ctx.messages),
		leaves: leaves(file),
		marks,
	};
}

const [command, ...rest] = process.argv.slice(2);
const out = [];
if (command === "write") {
	const dir = rest[0];
	for (const [name, build] of Object.entries(scenarios)) {
		const sm = SessionManager.create(`/projects/${name}`, dir);
		const marks = {};
		build(sm, (mark, id) => {
			marks[mark] = id;
		});
		out.push(describe(name, sm.getSessionFile(), sm, marks));
	}
} else if (command === "context") {
	for (const file of rest) {
		out.push(describe("", file, SessionManager.open(file)));
	}
} else {
	throw new Error(`usage: pi_sessions.mjs write DIR | context FILE...`);
}
process.stdout.write(JSON.stringify(out));
