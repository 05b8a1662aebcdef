// Writes src/generated/openapi.ts from the API's OpenAPI schema (`manage.py spectacular`), or
// with --check fails when the committed file differs from what the schema gives now.
// Dev tool (Node only); PYTHON names the interpreter of the project's venv (default ../../.venv).
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const target = fileURLToPath(new URL("../src/generated/openapi.ts", import.meta.url));
const python = process.env.PYTHON ?? `${root}.venv/bin/python`;

// The schema as a PostgreSQL deployment publishes it: integer ranges depend on the database
// backend, so SQLite would give other bounds. Nothing connects to this address. DEBUG=1 lets
// the settings load with their development secrets (none of them is in the schema). Of the
// shell's environment only what running Python needs is passed on: a deployment's settings
// there (the keyless window the Idempotency-Key's description names, BENCH_ENDPOINTS' routes)
// would give that deployment's schema, not the code's, and --check would call it stale.
const PASSED_ON = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "SYSTEMROOT"];
const env = {
  ...Object.fromEntries(PASSED_ON.filter((name) => name in process.env).map((name) => [name, process.env[name]])),
  DEBUG: "1",
  DATABASE_URL: "postgres://schema@127.0.0.1:1/schema",
};
const schema = execFileSync(python, ["manage.py", "spectacular", "--format", "openapi-json"], {
  cwd: root,
  env,
  maxBuffer: 64 * 1024 * 1024,
  stdio: ["ignore", "pipe", "inherit"],
});
const generated =
  "// Generated from the API's OpenAPI schema by `npm run generate`: do not edit.\n\n" +
  astToString(
    // A field with a default is optional in a request body (`note`), as the server treats it.
    await openapiTS(JSON.parse(schema.toString("utf8")), { defaultNonNullable: false }),
  );

if (process.argv.includes("--check")) {
  if (readFileSync(target, "utf8") !== generated) {
    console.error(`${target} is stale: the API schema changed. Run \`npm run generate\` in clients/typescript.`);
    process.exit(1);
  }
  console.log("generated types are up to date");
} else {
  writeFileSync(target, generated);
  console.log(`wrote ${target}`);
}
