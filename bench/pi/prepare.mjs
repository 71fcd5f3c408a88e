// Times pi-mono's published prepareCompaction on one session, inside Node.
//
// usage: node prepare.mjs ENTRIES.json RUNS [WARMUP]
//
// ENTRIES.json: {entries: SessionEntry[], settings: {enabled, reserveTokens, keepRecentTokens}}
// stdout: JSON {version, samplesMs, promptSamplesMs, firstKeptEntryIndex, isSplitTurn,
//               messagesToSummarize, turnPrefixMessages, tokensBefore, promptChars}
//
// samplesMs times prepareCompaction(entries, settings) alone. promptSamplesMs times
// prepareCompaction followed by the prompt text pi's generateSummary builds before it
// calls the model (convertToLlm + serializeConversation of the messages to summarise,
// and of the turn prefix when the turn is split), i.e. the work behind a ctxwarden
// PrepareCompaction answer, which carries the rendered prompts.
//
// pi 0.73.1 does not re-export prepareCompaction from the package root (it does export
// findCutPoint, compact, generateSummary, serializeConversation and convertToLlm), and the
// package's "exports" map refuses a deep specifier. So the root entry is resolved and the
// compaction module next to it is imported by file URL: the very module instance that the
// root re-exports findCutPoint from (checked below), i.e. the code pi's AgentSession runs.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import * as pi from "@mariozechner/pi-coding-agent";

const rootUrl = import.meta.resolve("@mariozechner/pi-coding-agent");
const compaction = await import(new URL("./core/compaction/compaction.js", rootUrl).href);
const { prepareCompaction } = compaction;
if (typeof prepareCompaction !== "function" || compaction.findCutPoint !== pi.findCutPoint) {
	throw new Error("dist/core/compaction/compaction.js is not the module the package root exports");
}
const manifestUrl = new URL("../package.json", rootUrl);
const version = JSON.parse(readFileSync(manifestUrl, "utf8")).version;

const [file, runsArg, warmupArg] = process.argv.slice(2);
if (!file || !runsArg) {
	throw new TypeError("usage: node prepare.mjs ENTRIES.json RUNS [WARMUP]");
}
const runs = Number.parseInt(runsArg, 10);
const warmup = Number.parseInt(warmupArg ?? "3", 10);
const { entries, settings } = JSON.parse(readFileSync(file, "utf8"));

function promptText(prep) {
	// What generateSummary / the turn-prefix summary serialise before calling the model.
	let chars = pi.serializeConversation(pi.convertToLlm(prep.messagesToSummarize)).length;
	if (prep.isSplitTurn) {
		chars += pi.serializeConversation(pi.convertToLlm(prep.turnPrefixMessages)).length;
	}
	return chars;
}

let prep;
let promptChars = 0;
for (let i = 0; i < warmup; i++) {
	prep = prepareCompaction(entries, settings);
	promptChars = promptText(prep);
}
// Two separate loops, so the garbage of the prompt strings is not collected inside
// the timings of the bare call.
const samplesMs = [];
for (let i = 0; i < runs; i++) {
	const t0 = performance.now();
	prep = prepareCompaction(entries, settings);
	samplesMs.push(performance.now() - t0);
}
const promptSamplesMs = [];
for (let i = 0; i < runs; i++) {
	const t0 = performance.now();
	const p = prepareCompaction(entries, settings);
	promptChars = promptText(p);
	promptSamplesMs.push(performance.now() - t0);
}
if (prep === undefined) {
	throw new Error("prepareCompaction returned undefined (nothing to compact)");
}
const firstKeptEntryIndex = entries.findIndex((e) => e.id === prep.firstKeptEntryId);
process.stdout.write(
	JSON.stringify({
		version,
		samplesMs,
		promptSamplesMs,
		firstKeptEntryIndex,
		isSplitTurn: prep.isSplitTurn,
		messagesToSummarize: prep.messagesToSummarize.length,
		turnPrefixMessages: prep.turnPrefixMessages.length,
		tokensBefore: prep.tokensBefore,
		promptChars,
	}),
);
