// The streaming snippet of docs/guides/typescript-compaction.md runs as
// written against a real server (its package import pointed at src/, its
// address at the test's server) and prints what the guide says.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { repoRoot, startServer, type RunningServer } from "./server.js";

const guide = join(repoRoot, "docs", "guides", "typescript-compaction.md");
const packageRoot = fileURLToPath(new URL("..", import.meta.url));

/** The first ```ts block after `heading`. */
function snippetAfter(markdown: string, heading: string): string {
  const start = markdown.indexOf(heading);
  assert.ok(start >= 0, `the guide has no "${heading}"`);
  const block = /```ts\n([\s\S]*?)```/.exec(markdown.slice(start));
  assert.ok(block !== null, `no ts block after "${heading}"`);
  return block[1]!;
}

let server: RunningServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

test("the guide's coalesced-streaming snippet runs and prints one lastSeq per send", () => {
  const snippet = snippetAfter(readFileSync(guide, "utf8"), "## Coalesced streaming appends");
  assert.match(snippet, /from "@ctxwarden\/client";/);
  const runnable = snippet
    .replace('from "@ctxwarden/client";', `from ${JSON.stringify(join(packageRoot, "src", "index.ts"))};`)
    .replace('"127.0.0.1:50051"', JSON.stringify(server.target));
  const dir = mkdtempSync(join(tmpdir(), "ctxwarden-guide-"));
  try {
    const file = join(dir, "snippet.mts"); // an ES module outside any package.json
    writeFileSync(file, runnable);
    const out = execFileSync(process.execPath, ["--import", "tsx", file], { cwd: packageRoot, encoding: "utf8" });
    assert.equal(out.trim(), "1n 2n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
