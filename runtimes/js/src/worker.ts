/**
 * The worker thread that runs one episode's harness instance. It owns the
 * untrusted wasm; the main thread owns the deadline (it terminates this
 * worker) and the answer checks. The env view is a synchronous import, so
 * a call blocks here on Atomics.wait until the main thread has answered on
 * the shared port.
 */

import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from "node:worker_threads";
import { pathToFileURL } from "node:url";

import { HOOK_TYPES, fromCanonical, toCanonical } from "./canonical.js";
import { jsonKind, loggedArguments, MAX_TOOL_ARGUMENT_BYTES, parseJson, utf8Len } from "./checks.js";
import { VirtualWasi, episodeSeed } from "./virtual-wasi.js";

interface Init {
  harnessJs: string;
  modules: Record<string, WebAssembly.Module>;
  imports: string[];
  limits: { env_view_calls_per_hook: number; log_lines_per_hook: number; stdio_bytes: number };
  viewPort: MessagePort;
  viewFlag: SharedArrayBuffer;
}

const init = workerData as Init;
const flag = new Int32Array(init.viewFlag);
const port = parentPort!;
const MAX_LOG_BYTES = 4096;

/** A contract violation raised by the host side of an import. */
class Violation extends Error {
  constructor(
    readonly violation: string,
    message: string,
  ) {
    super(message);
  }
}

class GuestExit extends Error {}

let tools: Map<string, boolean> | null = null;
let viewCount = 0;
let logs: Array<[string, string]> = [];
let viewLog: Array<{ name: string; arguments: string; answer: unknown }> = [];
let violation: Violation | null = null;
let stderr = Buffer.alloc(0);

function answerView(name: string, args: string): any {
  viewCount += 1;
  if (viewCount > init.limits.env_view_calls_per_hook) {
    throw (violation = new Violation(
      "env_view_quota",
      `made more than ${init.limits.env_view_calls_per_hook} env-view calls in one hook`,
    ));
  }
  // The host's work per call is bounded before anything is parsed
  // (host_state.rs, the same cap as a harness-written call's).
  const bytes = utf8Len(args);
  if (bytes > MAX_TOOL_ARGUMENT_BYTES) {
    return {
      tag: "err",
      val: { tag: "invalid-arguments", val: `arguments are ${bytes} bytes, over the env view's cap of ${MAX_TOOL_ARGUMENT_BYTES}` },
    };
  }
  const mutates = tools?.get(name);
  if (mutates === undefined) return { tag: "err", val: { tag: "unknown-tool", val: name } };
  if (mutates) {
    throw (violation = new Violation(
      "mutating_via_env_view",
      `tried to call mutating tool \`${name}\` through the read-only env view`,
    ));
  }
  let parsed: unknown;
  try {
    parsed = parseJson(args);
  } catch (e) {
    return { tag: "err", val: { tag: "invalid-arguments", val: (e as Error).message } };
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    return { tag: "err", val: { tag: "invalid-arguments", val: `expected a JSON object, got ${jsonKind(parsed)}` } };
  }
  // Ask the main thread and block until it answered.
  Atomics.store(flag, 0, 0);
  init.viewPort.postMessage({ name, args: parsed });
  Atomics.wait(flag, 0, 0);
  const reply = receiveMessageOnPort(init.viewPort)?.message as { content: string; error: boolean };
  return reply.error ? { tag: "err", val: { tag: "tool-error", val: reply.content } } : { tag: "ok", val: reply.content };
}

class OutputStream {
  constructor(private readonly keep: boolean) {}
  checkWrite(): bigint {
    return 1n << 20n;
  }
  write(bytes: Uint8Array): void {
    if (!this.keep) return;
    const room = init.limits.stdio_bytes - stderr.length;
    if (room > 0) stderr = Buffer.concat([stderr, Buffer.from(bytes.subarray(0, room))]);
  }
  blockingWriteAndFlush(bytes: Uint8Array): void {
    this.write(bytes);
  }
  blockingFlush(): void {}
  flush(): void {}
  subscribe(): Pollable {
    return new Pollable();
  }
}
class InputStream {}
class Pollable {
  block(): void {}
  ready(): boolean {
    return true;
  }
}
class IoError {
  toDebugString(): string {
    return "io error";
  }
}
class TerminalInput {}
class TerminalOutput {}
const stdout = new OutputStream(false);
const stderrStream = new OutputStream(true);
const stdin = new InputStream();

/** Deny by default: the only imports a harness gets, with the episode's
 * virtual WASI ([`importObject`]). Anything else fails to link, and the
 * WASI profile was checked on load from the transpiled import list. */
const GRANTED: Record<string, Record<string, unknown>> = {
  "ecdysis:harness/env-view": {
    callReadOnly(name: string, args: string): string {
      const answer = answerView(name, args);
      viewLog.push({ name, arguments: loggedArguments(args), answer });
      if (answer.tag === "ok") return answer.val;
      throw answer.val; // jco turns a thrown payload into `err`
    },
  },
  "ecdysis:harness/host-log": {
    log(level: string, message: string): void {
      if (logs.length >= init.limits.log_lines_per_hook) return;
      const raw = Buffer.from(message, "utf8");
      if (raw.length > MAX_LOG_BYTES) message = raw.subarray(0, MAX_LOG_BYTES).toString("utf8").replace(/\uFFFD+$/, "") + "…";
      logs.push([level, message]);
    },
  },
  "ecdysis:harness/types": {},
  "wasi:io/error": { Error: IoError },
  "wasi:io/poll": { Pollable, poll: () => new Uint32Array(0) },
  "wasi:io/streams": { InputStream, OutputStream },
  "wasi:cli/environment": { getEnvironment: () => [], getArguments: () => [], initialCwd: () => undefined },
  "wasi:cli/exit": {
    exit(): never {
      throw new GuestExit("the guest called exit");
    },
  },
  "wasi:cli/stdin": { getStdin: () => stdin },
  "wasi:cli/stdout": { getStdout: () => stdout },
  "wasi:cli/stderr": { getStderr: () => stderrStream },
  "wasi:cli/terminal-input": { TerminalInput },
  "wasi:cli/terminal-output": { TerminalOutput },
  "wasi:cli/terminal-stdin": { getTerminalStdin: () => undefined },
  "wasi:cli/terminal-stdout": { getTerminalStdout: () => undefined },
  "wasi:cli/terminal-stderr": { getTerminalStderr: () => undefined },
};

function importObject(virt: VirtualWasi): Record<string, unknown> {
  const out: Record<string, unknown> = { ...GRANTED, ...virt.imports(Pollable) };
  for (const name of init.imports) {
    const base = name.split("@")[0];
    out[name] = out[base];
  }
  return out;
}

function classify(e: unknown): { kind: string; message: string; violation?: string } {
  const err = e as Error;
  const text = stderr.toString("utf8").trim();
  if (e instanceof Violation || violation) {
    const v = (e instanceof Violation ? e : violation)!;
    return { kind: "contract_violation", violation: v.violation, message: v.message };
  }
  if (err instanceof RangeError && /call stack/i.test(err.message)) {
    return { kind: "stack_overflow", message: "overflowed the wasm stack" };
  }
  if (/memory allocation of .* failed/.test(text)) {
    return { kind: "memory_limit", message: "hit the memory limit" };
  }
  return { kind: "trap", message: `trapped: ${text ? text + "\n" : ""}${err?.message ?? String(e)}` };
}

let episode: any = null;

function reset(): void {
  viewCount = 0;
  logs = [];
  viewLog = [];
  violation = null;
}

port.on("message", (msg: { hook: string; arg: any; tools?: Array<[string, boolean]> }) => {
  reset();
  if (msg.tools) tools = new Map(msg.tools);
  const [argType, answerType] = HOOK_TYPES[msg.hook];
  const started = performance.now();
  try {
    let answer: unknown = null;
    if (msg.hook === "constructor") {
      const { instantiate } = loaded;
      // Seeded from the episode info, as the host seeds it.
      const info = msg.arg as { domain: string; "max-steps": number; "max-errors": number };
      const virt = new VirtualWasi(episodeSeed(info.domain, info["max-steps"], info["max-errors"]));
      const root = instantiate((path: string) => init.modules[path], importObject(virt));
      const hooks = root["ecdysis:harness/hooks@0.1.0"] ?? root.hooks;
      episode = new hooks.Episode(fromCanonical(argType, msg.arg));
    } else {
      const result = episode[msg.hook](fromCanonical(argType, msg.arg));
      answer = toCanonical(answerType!, result);
    }
    port.postMessage({ ok: true, answer, micros: Math.round((performance.now() - started) * 1000), viewCount, logs, viewLog });
  } catch (e) {
    port.postMessage({ ok: false, error: classify(e), viewCount, logs, viewLog });
  }
});

const loaded = await import(pathToFileURL(init.harnessJs).href);
port.postMessage({ ready: true });
