// Guards `npm pack` (a few seconds, without running the build): the build
// config emits dist/ from src/ alone without re-checking the dependencies'
// .d.ts files (checking them made packing several times slower; `npm run
// typecheck` checks them), and the tarball holds only the package's files.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import ts from "typescript";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  files: string[];
  exports: Record<string, { types: string; default: string }>;
  scripts: Record<string, string>;
};

test("the build compiles src/ (and the types/ shims) only, with skipLibCheck", () => {
  assert.equal(pkg.scripts["prepack"], "npm run build");
  assert.equal(pkg.scripts["build"], "tsc -p tsconfig.build.json");
  const config = ts.getParsedCommandLineOfConfigFile(`${root}/tsconfig.build.json`, {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(ts.flattenDiagnosticMessageText(d.messageText, "\n")),
  });
  assert.ok(config !== undefined);
  assert.deepEqual(config.errors, []);
  assert.equal(config.options.skipLibCheck, true, "tsconfig.build.json must set skipLibCheck (npm test checks the libraries)");
  assert.equal(config.options.noEmit, false);
  const outside = config.fileNames.map((f) => relative(root, f)).filter((f) => !/^(src\/.+\.ts|types\/[^/]+\.d\.ts)$/.test(f));
  assert.deepEqual(outside, [], "the build compiles files outside src/ and types/");
  assert.ok(config.fileNames.length > 5);
});

test("npm pack lists only package.json, README.md, src/ and dist/; every export has its source", () => {
  assert.deepEqual(pkg.files, ["dist", "src", "README.md"]);
  // --ignore-scripts: list the files without building (dist/ is listed if it was built).
  const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  const [pack] = JSON.parse(out) as { files: { path: string }[]; entryCount: number }[];
  const paths = pack!.files.map((f) => f.path).sort();
  const unexpected = paths.filter(
    (p) =>
      !(
        p === "package.json" ||
        p === "README.md" ||
        /^src\/.+\.ts$/.test(p) ||
        /^dist\/.+\.(js|js\.map|d\.ts|d\.ts\.map)$/.test(p)
      ),
  );
  assert.deepEqual(unexpected, [], "npm pack would ship more than the package's files");
  for (const required of ["package.json", "README.md", "src/index.ts", "src/gen/ctxwarden/v1/context_service_pb.ts"]) {
    assert.ok(paths.includes(required), `npm pack would not ship ${required}`);
  }
  // Every dist file comes from a source in src/ (no stale output of a removed file).
  for (const p of paths.filter((p) => p.startsWith("dist/"))) {
    const source = p.replace(/^dist\//, "src/").replace(/(\.d)?\.(js|ts)(\.map)?$/, ".ts");
    assert.ok(paths.includes(source), `${p} has no source ${source} (stale dist/: delete it and build again)`);
  }
  for (const [entry, target] of Object.entries(pkg.exports)) {
    const source = target.default.replace(/^\.\/dist\//, "src/").replace(/\.js$/, ".ts");
    assert.ok(existsSync(`${root}/${source}`), `export ${entry} (${target.default}) has no source ${source}`);
    assert.equal(target.types, target.default.replace(/\.js$/, ".d.ts"));
  }
});
