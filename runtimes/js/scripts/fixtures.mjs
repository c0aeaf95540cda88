// Transpile the fixtures runtimes/test.sh built (target/runtimes-fixtures,
// or $ECDYSIS_FIXTURES) with this package's transpile step, into <fix>/js/.
import { existsSync, readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { transpileHarness } from "../dist/transpile.js";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const fix = process.env.ECDYSIS_FIXTURES ?? join(repo, "target", "runtimes-fixtures");
if (!existsSync(join(fix, "ready"))) {
  console.error(`no fixtures in ${fix}: run \`bash runtimes/test.sh\` (it builds them with the host binary)`);
  process.exit(1);
}
await transpileHarness(join(fix, "template"), join(fix, "js", "template"));
await transpileHarness(join(fix, "evolved"), join(fix, "js", "evolved"));
await transpileHarness(join(fix, "template-py"), join(fix, "js", "template-py"));
await transpileHarness(join(fix, "evolved-py"), join(fix, "js", "evolved-py"));
await transpileHarness(join(fix, "template-two-layers"), join(fix, "js", "template-two-layers"));
for (const f of readdirSync(join(fix, "hostile"))) {
  if (f.endsWith(".wasm")) await transpileHarness(join(fix, "hostile", f), join(fix, "js", "hostile", f.replace(/\.wasm$/, "")));
}
