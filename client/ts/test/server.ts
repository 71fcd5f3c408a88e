/**
 * Starts a real ctxwarden server process for the tests: `CTXWARDEN_BIN`
 * (default: the repository's .venv/bin/ctxwarden) on a fresh SQLite file in a
 * temp dir, listening on a free loopback port.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The repository root, from this file's location (client/ts/test/). */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

export interface RunningServer {
  /** `127.0.0.1:PORT` as the server printed it. */
  target: string;
  /** Everything the server wrote to stderr so far (its logs). */
  stderr(): string;
  /** SIGTERM, wait for the exit (SIGKILL after 15 s), remove the temp dir. */
  stop(): Promise<void>;
}

export async function startServer(extraArgs: string[] = []): Promise<RunningServer> {
  const bin = process.env["CTXWARDEN_BIN"] ?? join(repoRoot, ".venv", "bin", "ctxwarden");
  const dir = mkdtempSync(join(tmpdir(), "ctxwarden-ts-"));
  const child: ChildProcess = spawn(
    bin,
    ["serve", "--listen", "127.0.0.1:0", "--database-url", `sqlite:///${join(dir, "ctxwarden.db")}`, ...extraArgs],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));

  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const target = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`server not ready after 60 s; stderr:\n${stderr}`)), 60_000);
      const lines = createInterface({ input: child.stdout! });
      lines.on("line", (line) => {
        const m = /^ctxwarden listening on (\S+:\d+)$/.exec(line.trim());
        if (m !== null) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      child.once("error", (err) => {
        clearTimeout(timer);
        reject(new Error(`cannot start ${bin}: ${err.message}`));
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${bin} exited before it was ready (code ${code}, signal ${signal}); stderr:\n${stderr}`));
      });
    });
    return { target, stderr: () => stderr, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
