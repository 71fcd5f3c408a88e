// Runs pi-mono's published findCutPoint over a batch of cases.
//
// stdin:  JSON array of {entries: SessionEntry[], keepRecentTokens: number}
// stdout: JSON array of {firstKeptEntryIndex, turnStartIndex, isSplitTurn}, one per case
//
// With --tokens each result also carries entryTokens: pi's estimateTokens() of every
// message entry, so a caller can tell a token-count difference from a cut difference.
//
// findCutPoint is part of the package's public API (re-exported from the root
// entry point, dist/index.js -> dist/core/compaction/index.js -> compaction.js),
// so no deep import is needed; the package's "exports" map would refuse one anyway.
import { estimateTokens, findCutPoint } from "@mariozechner/pi-coding-agent";

const withTokens = process.argv.includes("--tokens");

const chunks = [];
for await (const chunk of process.stdin) {
	chunks.push(chunk);
}
const cases = JSON.parse(Buffer.concat(chunks).toString("utf8"));
if (!Array.isArray(cases)) {
	throw new TypeError("expected a JSON array of cases on stdin");
}

const results = cases.map((c, n) => {
	if (!Array.isArray(c.entries) || typeof c.keepRecentTokens !== "number") {
		throw new TypeError(`case ${n}: expected {entries: [...], keepRecentTokens: number}`);
	}
	const r = findCutPoint(c.entries, 0, c.entries.length, c.keepRecentTokens);
	const out = {
		firstKeptEntryIndex: r.firstKeptEntryIndex,
		turnStartIndex: r.turnStartIndex,
		isSplitTurn: r.isSplitTurn,
	};
	if (withTokens) {
		out.entryTokens = c.entries.map((e) => (e.type === "message" ? estimateTokens(e.message) : null));
	}
	return out;
});

process.stdout.write(JSON.stringify(results));
