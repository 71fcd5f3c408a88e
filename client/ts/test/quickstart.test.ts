// examples/quickstart.ts, the program the repository's README and docs show,
// runs against a real ctxwarden server that requires an API key: with the key
// it prints the flow, without it it fails with the server's reason.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { startServer, type RunningServer } from "./server.js";

const API_KEY = "ck_quickstart_0123456789";
let server: RunningServer;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "ctxwarden-ts-quickstart-"));
  const digest = createHash("sha256").update(API_KEY).digest("hex");
  writeFileSync(join(dir, "api-keys"), `acme:${digest}\n`);
  server = await startServer(["--api-keys-file", join(dir, "api-keys")]);
});

after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs examples/quickstart.ts with `env` (and no inherited CTXWARDEN_ variables). */
async function quickstart(env: Record<string, string>): Promise<{ code: number; out: string }> {
  const cwd = fileURLToPath(new URL("..", import.meta.url));
  const rest = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("CTXWARDEN_")));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", "examples/quickstart.ts"], {
      cwd,
      env: { ...rest, ...env },
      timeout: 60_000,
    });
    return { code: 0, out: stdout };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, out: `${e.stdout ?? ""}${e.stderr ?? String(err)}` };
  }
}

test("the quickstart runs the whole flow with the API key", async () => {
  const { code, out } = await quickstart({ CTXWARDEN_TARGET: server.target, CTXWARDEN_API_KEY: API_KEY });
  assert.equal(code, 0, out);
  const lines = out.trim().split("\n");
  assert.match(lines[0]!, /^model input: 1 messages, \d+ tokens$/);
  assert.equal(lines[1], 'tool call: read {"path":"setup.py"}');
  assert.equal(lines[2], "rollback: RETRY");
  assert.equal(lines[3], "model input: 4 messages: USER ASSISTANT TOOL_RESULT ASSISTANT");
});

test("without the key the quickstart reports the server's reason", async () => {
  const { code, out } = await quickstart({ CTXWARDEN_TARGET: server.target });
  assert.equal(code, 1, out);
  assert.match(out, /reason MISSING_CREDENTIALS/);
});
