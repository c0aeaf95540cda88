/**
 * Build step: transpile a harness component with jco (`instantiation:
 * sync`, so the runtime supplies the core modules and the imports itself)
 * into `<dir>/js/`, with `transpiled.json` naming the component's blake3,
 * imports, exports and core modules.
 */

import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { blake3 } from "@noble/hashes/blake3.js";
import { bytesToHex } from "@noble/hashes/utils.js";

export const TRANSPILED_FORMAT = "ecdysis-harness-js/1";

/** Transpile `source` (an export directory with harness.wasm, or a .wasm
 * file) into `outDir` (default: the export directory itself). Returns the
 * directory to pass to `Harness.load`. */
export async function transpileHarness(source: string, outDir?: string): Promise<string> {
  const isDir = statSync(source).isDirectory();
  const wasmPath = isDir ? join(source, "harness.wasm") : source;
  const out = outDir ?? (isDir ? source : join(dirname(source), basename(source, ".wasm")));
  mkdirSync(out, { recursive: true });
  const bytes = readFileSync(wasmPath);
  if (wasmPath !== join(out, "harness.wasm")) copyFileSync(wasmPath, join(out, "harness.wasm"));
  const manifest = join(dirname(wasmPath), "harness.json");
  if (existsSync(manifest) && manifest !== join(out, "harness.json")) copyFileSync(manifest, join(out, "harness.json"));
  let jco: typeof import("@bytecodealliance/jco");
  try {
    jco = await import("@bytecodealliance/jco");
  } catch {
    throw new Error("transpiling needs @bytecodealliance/jco: npm install --save-dev @bytecodealliance/jco");
  }
  const { files, imports, exports } = await jco.transpile(new Uint8Array(bytes), {
    name: "harness",
    instantiation: "sync",
    quiet: true,
  });
  const js = join(out, "js");
  rmSync(js, { recursive: true, force: true });
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(dirname(join(js, name)), { recursive: true });
    writeFileSync(join(js, name), content);
  }
  const info = {
    format: TRANSPILED_FORMAT,
    hash: bytesToHex(blake3(bytes)),
    imports,
    exports: exports.map(([name]) => name),
    core_modules: Object.keys(files).filter((f) => f.endsWith(".wasm")),
  };
  writeFileSync(join(js, "transpiled.json"), JSON.stringify(info, null, 2) + "\n");
  return out;
}
