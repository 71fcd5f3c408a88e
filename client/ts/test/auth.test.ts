// The apiKey option against real ctxwarden servers that require an API key
// (--api-keys-file): in plaintext on loopback and over TLS (--tls-cert /
// --tls-key, a self-signed certificate trusted with the tls.ca option).
// Without the key calls fail with UNAUTHENTICATED, with it they succeed.
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import {
  Code,
  ConnectError,
  createClient,
  errorReason,
  isLoopbackHost,
  user,
  type ClientOptions,
  type CtxwardenClient,
} from "../src/index.js";
import { startServer, type RunningServer } from "./server.js";

const API_KEY = "ck_test_0123456789abcdef";

/** A temp dir with an --api-keys-file granting API_KEY to tenant "acme". */
function authDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "ctxwarden-ts-auth-"));
  const digest = createHash("sha256").update(API_KEY).digest("hex");
  writeFileSync(join(dir, "api-keys"), `# tenant:sha256(key)\nacme:${digest}\n`);
  return dir;
}

/** Rejects with the ConnectError of `call`; fails if it succeeds. */
async function connectError(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof ConnectError, `not a ConnectError: ${String(err)}`);
    return err;
  }
  assert.fail("the call succeeded");
}

/** The README's calls: create a session, append, build the model input. */
async function useSession(client: CtxwardenClient): Promise<number> {
  const { sessionId } = await client.createSession({ session: { systemPrompt: "Be brief." } });
  await client.appendMessages({ sessionId, messages: [user("hello")] });
  const input = await client.buildModelInput({ sessionId });
  return input.messages.length;
}

async function expectRefused(target: string, opts: ClientOptions, reason: string): Promise<void> {
  const client = createClient(target, { retry: false, ...opts });
  try {
    const err = await connectError(useSession(client));
    assert.equal(err.code, Code.Unauthenticated, err.message);
    assert.equal(errorReason(err), reason);
  } finally {
    client.close();
  }
}

test("createClient refuses to send an API key in plaintext to a host that is not loopback", () => {
  assert.throws(() => createClient("ctxwarden.internal:50051", { apiKey: API_KEY }), /plaintext to ctxwarden\.internal:50051.*https:\/\//);
  assert.throws(() => createClient("http://10.1.2.3:50051", { apiKey: API_KEY }), /plaintext/);
  assert.throws(() => createClient("127.0.0.1:50051", { apiKey: "" }), /non-empty/);
  assert.throws(() => createClient("127.0.0.1:50051", { apiKey: ` ${API_KEY}` }), /whitespace/);
  assert.throws(() => createClient("127.0.0.1:50051", { tls: { ca: "x" } }), /https:\/\//);
  // Allowed: TLS anywhere, plaintext on loopback, or plaintext when asked for. (No call is made.)
  for (const [target, opts] of [
    ["https://ctxwarden.internal:50051", {}],
    ["127.0.0.1:50051", {}],
    ["http://[::1]:50051", {}],
    ["localhost:50051", {}],
    ["ctxwarden.internal:50051", { allowInsecureApiKey: true }],
  ] as const) {
    createClient(target, { apiKey: API_KEY, ...opts }).close();
  }
  for (const host of ["127.0.0.1", "127.3.2.1", "[::1]", "::1", "localhost", "LOCALHOST", "[::ffff:7f00:1]"]) {
    assert.ok(isLoopbackHost(host), host);
  }
  for (const host of ["10.0.0.1", "128.0.0.1", "[::2]", "example.com", "localhost.example.com", "127.0.0.1.example.com"]) {
    assert.ok(!isLoopbackHost(host), host);
  }
});

/** The region `readme-auth` of examples/auth.ts, as the README shows it (importing the package). */
function authExample(): string {
  const source = readFileSync(new URL("../examples/auth.ts", import.meta.url), "utf8");
  const match = /\/\/ #region readme-auth\n([\s\S]*?)\n\/\/ #endregion readme-auth/.exec(source);
  assert.ok(match !== null, "no region readme-auth in examples/auth.ts");
  return match[1]!.replace('from "../src/index.js"', 'from "@ctxwarden/client"');
}

/** Runs examples/auth.ts with `env`; its exit code and output. */
async function runAuthExample(env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const cwd = fileURLToPath(new URL("..", import.meta.url));
  const { CTXWARDEN_TARGET: _t, CTXWARDEN_API_KEY: _k, ...rest } = process.env;
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ["--import", "tsx", "examples/auth.ts"], {
      cwd,
      env: { ...rest, ...env },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? String(err) };
  }
}

test("the README shows examples/auth.ts whole", () => {
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const example = authExample();
  assert.ok(readme.includes("```ts\n" + example + "\n```"), "README.md's authentication example differs from examples/auth.ts");
});

describe("apiKey against a server started with --api-keys-file (plaintext, loopback)", () => {
  let server: RunningServer;
  let dir: string;

  before(async () => {
    dir = authDir();
    server = await startServer(["--api-keys-file", join(dir, "api-keys")]);
  });

  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("without the key: UNAUTHENTICATED (MISSING_CREDENTIALS); a wrong key: INVALID_CREDENTIALS", async () => {
    await expectRefused(server.target, {}, "MISSING_CREDENTIALS");
    await expectRefused(server.target, { apiKey: "ck_wrong" }, "INVALID_CREDENTIALS");
  });

  test("examples/auth.ts: with CTXWARDEN_API_KEY it runs; without, it fails with UNAUTHENTICATED", async () => {
    const ok = await runAuthExample({ CTXWARDEN_TARGET: server.target, CTXWARDEN_API_KEY: API_KEY });
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /^session \S+: 1 message\(s\), \d+ tokens\n$/);
    const refused = await runAuthExample({ CTXWARDEN_TARGET: server.target });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /ConnectError: \[unauthenticated\]/);
  });

  test("with the key: the calls succeed", async () => {
    const client = createClient(server.target, { apiKey: API_KEY });
    try {
      assert.equal(await useSession(client), 1);
      // The tenant's sessions: this one and the example's.
      const { sessions } = await client.listSessions({});
      assert.ok(sessions.length >= 1);
    } finally {
      client.close();
    }
  });
});

describe("apiKey over TLS (--tls-cert/--tls-key, https:// target, tls.ca)", () => {
  let server: RunningServer;
  let dir: string;
  let ca: string;

  before(async () => {
    dir = authDir();
    // A self-signed certificate for 127.0.0.1 and localhost, valid for a day.
    execFileSync(
      "openssl",
      [
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1",
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
      ],
      { stdio: "ignore" },
    );
    ca = readFileSync(join(dir, "cert.pem"), "utf8");
    server = await startServer([
      "--api-keys-file", join(dir, "api-keys"),
      "--tls-cert", join(dir, "cert.pem"),
      "--tls-key", join(dir, "key.pem"),
    ]);
  });

  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("without the key: UNAUTHENTICATED; with it: success; without tls.ca the certificate is refused", async () => {
    const target = `https://${server.target}`;
    await expectRefused(target, { tls: { ca } }, "MISSING_CREDENTIALS");
    const client = createClient(target, { apiKey: API_KEY, tls: { ca } });
    try {
      assert.equal(await useSession(client), 1);
    } finally {
      client.close();
    }
    const untrusted = createClient(target, { apiKey: API_KEY, retry: false });
    try {
      const err = await connectError(untrusted.listSessions({}));
      assert.match(err.message, /self-signed certificate/);
    } finally {
      untrusted.close();
    }
  });
});
