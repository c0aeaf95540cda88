// Generate the TypeScript types of the ecdysis:harness world with jco: a
// dummy component is made from the repository's WIT (wasm-tools' `component
// embed --dummy` through jco's API) and transpiled; its .d.ts files are the
// world's types. (`jco types` itself cannot read the WIT here: its WASI
// sandbox sees no host path.)
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { componentEmbed, componentNew, transpile } from "@bytecodealliance/jco";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const witSource = readFileSync(join(pkg, "..", "..", "wit", "harness.wit"), "utf8");
const core = await componentEmbed({ dummy: true, witSource, world: "harness" });
const { files } = await transpile(await componentNew(core), {
  name: "harness",
  instantiation: "sync",
  quiet: true,
});
const out = join(pkg, "src", "generated");
rmSync(out, { recursive: true, force: true });
for (const [name, bytes] of Object.entries(files)) {
  if (!name.endsWith(".d.ts")) continue;
  mkdirSync(dirname(join(out, name)), { recursive: true });
  writeFileSync(join(out, name), bytes);
}
