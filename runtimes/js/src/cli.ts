#!/usr/bin/env node
// ecdysis-harness-transpile <export-dir | harness.wasm> [out-dir]
import { transpileHarness } from "./transpile.js";

const [source, out] = process.argv.slice(2);
if (!source || source === "--help" || source === "-h") {
  console.error("usage: ecdysis-harness-transpile <export-dir | harness.wasm> [out-dir]\n" +
    "Transpiles the harness component with jco into <out-dir>/js (default: the export directory).");
  process.exit(source ? 0 : 2);
}
try {
  console.log(await transpileHarness(source, out));
} catch (e) {
  console.error(`error: ${(e as Error).message}`);
  process.exit(1);
}
