// Builds the console into internal/console/dist, which the warren binary
// embeds: the TypeScript of src/ and of the SDK (sdk/typescript/src),
// compiled together so that the page imports the SDK from its own origin
// (dist/console/src/*.js and dist/sdk/typescript/src/*.js), and the static
// files of static/. The folder's README.txt, the one committed file, stays.
import { spawnSync } from "node:child_process";
import { cpSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "internal", "console", "dist");
for (const name of readdirSync(out)) {
  if (name !== "README.txt") rmSync(join(out, name), { recursive: true, force: true });
}
const tsc = spawnSync(process.execPath, [join(here, "node_modules", "typescript", "bin", "tsc"), "-p", here], { stdio: "inherit" });
if (tsc.status !== 0) process.exit(tsc.status ?? 1);
cpSync(join(here, "static"), out, { recursive: true });
