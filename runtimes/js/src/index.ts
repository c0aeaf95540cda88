/**
 * Run a trained Ecdysis harness in a Node agent loop.
 *
 * The component is transpiled to JavaScript + core wasm by jco at build time
 * (`ecdysis-harness-transpile <export-dir>`); `Harness.load` verifies it and
 * each episode runs in its own `worker_thread` with V8 `resourceLimits`, a
 * per-hook deadline that terminates the worker, a memory cap patched into
 * the core modules, deny-by-default imports and the Rust host's answer
 * checks. jco runs on V8, which has no fuel metering: an endless loop is
 * stopped by the deadline, not by fuel.
 */

import { readFileSync, existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { MessageChannel, Worker } from "node:worker_threads";
import { blake3 } from "@noble/hashes/blake3.js";
import { bytesToHex } from "@noble/hashes/utils.js";

import { HOOK_TYPES, TYPES, fromCanonical, toCanonical } from "./canonical.js";
import { addedBytes, checkAdded, checkAnswer } from "./checks.js";
import {
  CompileError,
  ContractViolation,
  DeadlineExceeded,
  HarnessError,
  HashMismatch,
  HookError,
  LinkError,
  LoadError,
  MemoryLimit,
  Poisoned,
  Trap,
  UnsupportedWorld,
  hookError,
} from "./errors.js";
import { capMemories } from "./wasm-limits.js";
import { setFlagsFromString } from "node:v8";

// CPython components (componentize-py) use extended constant expressions, a
// finished wasm proposal that Node 20's V8 still ships behind this flag
// (on by default from Node 22). Process-wide, and harmless where it is on.
setFlagsFromString("--experimental-wasm-extended-const");
import type {
  ActionDecision,
  AgentAction,
  ContractInput,
  ContractOutput,
  Guidance,
  Regulation,
  StepReport,
  TaskView,
  ToolSpec,
} from "./generated/interfaces/ecdysis-harness-types.js";

export * from "./errors.js";
export type {
  ActionDecision,
  AgentAction,
  ContractInput,
  ContractOutput,
  EpisodeInfo,
  Guidance,
  Regulation,
  StepKind,
  StepReport,
  TaskView,
  ToolCall,
  ToolDescription,
  ToolOutcome,
  ToolSpec,
} from "./generated/interfaces/ecdysis-harness-types.js";
export { canonicalDumps, toCanonical, fromCanonical, TYPES } from "./canonical.js";

export const WORLD_VERSION = "ecdysis:harness/harness@0.1.0";
export const HOOKS_EXPORT = "ecdysis:harness/hooks@0.1.0";
export const SUPPORTED_WORLDS = [WORLD_VERSION];
/** The harness imports plus what a Rust guest's std needs to print a panic:
 * all the `minimal` WASI profile grants. */
const GRANTED = ["wasi:io/", "wasi:cli/", "ecdysis:harness/types", "ecdysis:harness/env-view", "ecdysis:harness/host-log"];
/** What the `virtual` profile (the default) grants besides: the virtual,
 * deterministic interfaces of `virtual-wasi.ts`, which give nothing away. */
const VIRTUAL_GRANTED = ["wasi:clocks/", "wasi:random/", "wasi:filesystem/", "wasi:sockets/"];
/** Which WASI a harness may import beyond `wasi:io` and `wasi:cli`, as the
 * host's `--wasi` flag and harness.json `limits.wasi`. */
export type WasiProfile = "minimal" | "virtual";

export interface Limits {
  /** Recorded for parity with the other runtimes; V8 has no fuel. */
  fuel_per_hook: number;
  deadline_ms: number;
  memory_bytes: number;
  max_output_bytes: number;
  max_list_items: number;
  env_view_calls_per_hook: number;
  log_lines_per_hook: number;
  stdio_bytes: number;
  /** Text the hooks of one episode may add to the model's input in all. */
  max_added_bytes: number;
  [other: string]: number;
}

export const DEFAULT_LIMITS: Limits = {
  fuel_per_hook: 20_000_000,
  deadline_ms: 2_000,
  memory_bytes: 64 << 20,
  max_output_bytes: 256 << 10,
  max_list_items: 256,
  env_view_calls_per_hook: 64,
  log_lines_per_hook: 64,
  stdio_bytes: 64 << 10,
  max_added_bytes: 64 << 10,
};

export type FailurePolicy = "fail-closed" | "fail-open";
/** The env view: answer a read-only tool call with its text (or
 * `{content, error: true}`); mutating tools never reach it. */
export type EnvView = (
  name: string,
  args: Record<string, unknown>,
) => string | { content: string; error: boolean } | Promise<string | { content: string; error: boolean }>;

export interface HookRecord {
  hook: string;
  /** The answer in canonical JSON (the neutral one after a fail-open failure). */
  answer: unknown;
  intervened: boolean;
  micros: number;
  envViewCalls: number;
  logs: Array<[string, string]>;
  error?: HarnessError;
  /** Bytes of text the answer put in front of the model. */
  addedBytes?: number;
}

export interface LoadOptions {
  limits?: Partial<Limits>;
  /** The WASI profile (default: harness.json `limits.wasi`, else
   * `virtual`). */
  wasi?: WasiProfile;
  policy?: FailurePolicy;
  /** The layers whose hooks are called (default: harness.json `layers`,
   * else all four). */
  layers?: Layer[];
}

/** The four layers, named by their hooks, in lifecycle order. */
export const LAYERS = ["contract", "skills", "realize", "regulate"] as const;
export type Layer = (typeof LAYERS)[number];

/** The layer set of a harness.json `layers` entry or a caller's list:
 * anything but a list of layer names is refused, naming it. */
export function parseLayers(value: unknown, source: string): ReadonlySet<Layer> {
  if (!Array.isArray(value)) throw new LoadError(`${source}: layers must be a list of layer names, not ${JSON.stringify(value)}`);
  const unknown = value.find((v) => !(LAYERS as readonly unknown[]).includes(v));
  if (unknown !== undefined) throw new LoadError(`${source}: unknown layer ${JSON.stringify(unknown)} (the layers are ${LAYERS.join(", ")})`);
  return new Set(value as Layer[]);
}

/** A verified, compiled harness, ready to start episodes. */
export class Harness {
  private constructor(
    readonly source: string,
    readonly hash: string,
    readonly manifest: any,
    readonly limits: Limits,
    readonly policy: FailurePolicy,
    /** The layers whose hooks are called; a switched-off hook answers
     * neutrally without calling the guest, and leaves no record. */
    readonly layers: ReadonlySet<Layer>,
    private readonly harnessJs: string,
    private readonly modules: Record<string, WebAssembly.Module>,
    private readonly imports: string[],
  ) {}

  /** Load a transpiled harness: a directory with harness.wasm, optional
   * harness.json, and js/ from `ecdysis-harness-transpile`. The blake3 of
   * harness.wasm must match harness.json and the transpiled code's source,
   * the world must be one this runtime implements, and the component may
   * import nothing beyond what the sandbox grants. */
  static async load(dir: string, options: LoadOptions = {}): Promise<Harness> {
    if (!existsSync(dir) || !statSync(dir).isDirectory()) {
      throw new LoadError(`${dir} is not a directory (run ecdysis-harness-transpile on the export first)`);
    }
    const wasm = readFileSync(join(dir, "harness.wasm"));
    const hash = bytesToHex(blake3(wasm));
    let manifest: any = null;
    if (existsSync(join(dir, "harness.json"))) {
      manifest = JSON.parse(readFileSync(join(dir, "harness.json"), "utf8"));
      if ((manifest.hash_algorithm ?? "blake3") !== "blake3" || manifest.hash !== hash) {
        throw new HashMismatch(`${dir}: harness.wasm hashes to blake3 ${hash}, but harness.json says ${manifest.hash}`);
      }
      if (!SUPPORTED_WORLDS.includes(manifest.world)) {
        throw new UnsupportedWorld(
          `${dir}: harness.json names world ${manifest.world}; this runtime implements ${SUPPORTED_WORLDS.join(", ")}`,
        );
      }
    }
    const jsDir = join(dir, "js");
    const transpiledPath = join(jsDir, "transpiled.json");
    if (!existsSync(transpiledPath)) throw new LoadError(`${dir} has no js/transpiled.json: run ecdysis-harness-transpile ${dir}`);
    const transpiled = JSON.parse(readFileSync(transpiledPath, "utf8"));
    if (transpiled.hash !== hash) {
      throw new HashMismatch(`${dir}: js/ was transpiled from blake3 ${transpiled.hash}, not this harness.wasm (${hash}); transpile again`);
    }
    const exportsList: string[] = transpiled.exports;
    if (!exportsList.includes(HOOKS_EXPORT)) {
      throw new UnsupportedWorld(`${dir}: the component exports ${exportsList.join(", ") || "nothing"}; this runtime implements ${WORLD_VERSION}`);
    }
    const { wasi: manifestWasi, ...manifestLimits } = manifest?.limits ?? {};
    const wasi: WasiProfile = options.wasi ?? manifestWasi ?? "virtual";
    if (wasi !== "minimal" && wasi !== "virtual") {
      throw new LoadError(`${dir}: unknown WASI profile \`${wasi}\` (expected \`minimal\` or \`virtual\`)`);
    }
    const granted = wasi === "virtual" ? [...GRANTED, ...VIRTUAL_GRANTED] : GRANTED;
    for (const name of transpiled.imports as string[]) {
      const base = name.split("@")[0];
      if (!granted.some((g) => (g.endsWith("/") ? base.startsWith(g) : base === g))) {
        throw new LinkError(
          `${dir}: the component imports \`${name}\`, which the \`${wasi}\` WASI profile does not grant ` +
            "(`virtual` grants frozen clocks, seeded randomness, an empty filesystem and refused sockets; nothing grants more)",
        );
      }
    }
    const limits: Limits = { ...DEFAULT_LIMITS, ...manifestLimits, ...(options.limits ?? {}) } as Limits;
    const modules: Record<string, WebAssembly.Module> = {};
    for (const file of transpiled.core_modules as string[]) {
      try {
        modules[file] = await WebAssembly.compile(capMemories(readFileSync(join(jsDir, file)), limits.memory_bytes) as Uint8Array<ArrayBuffer>);
      } catch (e) {
        throw new CompileError(`${dir}: cannot compile ${file}: ${(e as Error).message}`);
      }
    }
    const policy = options.policy ?? manifest?.failure_policy ?? "fail-closed";
    const layers = parseLayers(options.layers ?? manifest?.layers ?? LAYERS, dir);
    return new Harness(dir, hash, manifest, limits, policy, layers, join(jsDir, "harness.js"), modules, transpiled.imports);
  }

  /** Start an episode in a fresh worker. `tools` are the episode's tools
   * (default: learned from `contract`). */
  async episode(
    domain: string,
    maxSteps: number,
    maxErrors: number,
    options: { envView?: EnvView; tools?: ToolSpec[]; policy?: FailurePolicy } = {},
  ): Promise<Episode> {
    const ep = new Episode(this, options.envView, options.tools, options.policy ?? this.policy);
    await ep._boot(this.harnessJs, this.modules, this.imports);
    await ep._start({ domain, "max-steps": maxSteps, "max-errors": maxErrors });
    return ep;
  }
}

const WORKER = fileURLToPath(new URL("./worker.js", import.meta.url));
const NEUTRAL: Record<string, (arg: any) => unknown> = {
  contract: (arg) => ({ "system-prompt": arg["system-prompt"], "tool-descriptions": [] }),
  skills: () => [],
  realize: () => ({ tag: "proceed" }),
  regulate: () => ({ tag: "continue" }),
};

function isNeutral(hook: string, arg: any, answer: any): boolean {
  if (hook === "contract") return answer["system-prompt"] === arg["system-prompt"] && answer["tool-descriptions"].length === 0;
  if (hook === "skills") return answer.length === 0;
  if (hook === "realize") return answer.tag === "proceed";
  if (hook === "regulate") return answer.tag === "continue";
  return true;
}

/** One episode's harness instance, in its own worker thread. */
export class Episode {
  readonly records: HookRecord[] = [];
  /** Bytes of text this episode's answers have added to the model's input. */
  addedBytes = 0;
  last: HookRecord | null = null;
  /** Env-view calls of the last hook, with their canonical answers. */
  viewLog: Array<{ name: string; arguments: string; answer: unknown }> = [];
  private worker: Worker | null = null;
  private tools: Map<string, boolean> | null;
  private toolsSent = false;
  private poisoned = false;
  private pending: { resolve: (m: any) => void; reject: (e: Error) => void } | null = null;

  constructor(
    readonly harness: Harness,
    private readonly envView: EnvView | undefined,
    tools: ToolSpec[] | undefined,
    readonly policy: FailurePolicy,
  ) {
    this.tools = tools ? new Map(tools.map((t) => [t.name, t.mutates])) : null;
  }

  get failed(): boolean {
    return this.poisoned;
  }

  async _boot(harnessJs: string, modules: Record<string, WebAssembly.Module>, imports: string[]): Promise<void> {
    const limits = this.harness.limits;
    const { port1, port2 } = new MessageChannel();
    const viewFlag = new SharedArrayBuffer(4);
    const flag = new Int32Array(viewFlag);
    const heapMb = Math.max(32, Math.ceil((limits.memory_bytes + limits.max_output_bytes * 8) / (1 << 20)));
    const worker = new Worker(WORKER, {
      workerData: { harnessJs, modules, imports, limits, viewPort: port2, viewFlag },
      transferList: [port2],
      resourceLimits: { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: 16, stackSizeMb: 4 },
      stdout: true,
      stderr: true,
    });
    worker.unref();
    this.worker = worker;
    port1.on("message", async ({ name, args }: { name: string; args: Record<string, unknown> }) => {
      let reply: { content: string; error: boolean };
      try {
        const out = this.envView ? await this.envView(name, args) : { content: "this runtime was given no environment view", error: true };
        reply = typeof out === "string" ? { content: out, error: false } : { content: String(out.content), error: !!out.error };
      } catch (e) {
        reply = { content: `Error: ${(e as Error).message}`, error: true };
      }
      port1.postMessage(reply);
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
    });
    port1.unref();
    worker.on("message", (m) => {
      const p = this.pending;
      this.pending = null;
      p?.resolve(m);
    });
    worker.on("error", (e: any) => {
      const p = this.pending;
      this.pending = null;
      const err =
        e?.code === "ERR_WORKER_OUT_OF_MEMORY"
          ? new MemoryLimit(`the harness worker ran out of memory (${e.message})`)
          : new Trap(`the harness worker failed: ${e?.message ?? e}`);
      p?.reject(err);
    });
    worker.on("exit", () => {
      const p = this.pending;
      this.pending = null;
      p?.reject(new Trap("the harness worker exited"));
    });
    const ready = await this.roundTrip(null, 30_000);
    if (!ready.ready) throw new LoadError("the harness worker did not start");
  }

  private roundTrip(msg: unknown, timeoutMs: number): Promise<any> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending = null;
        this.kill();
        reject(new DeadlineExceeded(`passed its deadline of ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending = {
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      if (msg !== null) this.worker!.postMessage(msg);
    });
  }

  private kill(): void {
    this.poisoned = true;
    const w = this.worker;
    this.worker = null;
    void w?.terminate();
  }

  /** Call a hook with its canonical argument; returns the checked
   * canonical answer or throws the typed error (no policy). What
   * conformance replays use. */
  async invoke(hook: string, arg: any): Promise<any> {
    if (this.poisoned || !this.worker) throw new Poisoned("the episode's harness instance already failed and cannot be called again", hook);
    if (hook === "contract" && this.tools === null) {
      this.tools = new Map((arg.tools as any[]).map((t) => [t.name, t.mutates]));
    }
    const msg: any = { hook, arg };
    if (this.tools && !this.toolsSent) {
      msg.tools = [...this.tools.entries()];
      this.toolsSent = true;
    }
    let reply: any;
    try {
      reply = await this.roundTrip(msg, this.harness.limits.deadline_ms);
    } catch (e) {
      this.kill();
      const err = e as HookError;
      err.hook = hook;
      if (err instanceof DeadlineExceeded) err.message = `hook \`${hook}\` ${err.message}`;
      throw err;
    }
    this.viewLog = reply.viewLog;
    if (!reply.ok) {
      this.kill();
      const err = hookError(reply.error, hook);
      err.message = `hook \`${hook}\` ${err.message}`;
      throw err;
    }
    let added = 0;
    if (hook !== "constructor") {
      try {
        checkAnswer(hook, arg, reply.answer, new Set(this.tools?.keys() ?? []), this.harness.limits.max_output_bytes);
        added = addedBytes(hook, arg, reply.answer);
        this.addedBytes += added;
        checkAdded(this.addedBytes, this.harness.limits.max_added_bytes);
      } catch (e) {
        this.kill();
        (e as ContractViolation).hook = hook;
        throw e;
      }
    }
    this.record({
      hook,
      answer: reply.answer,
      intervened: hook === "constructor" ? false : !isNeutral(hook, arg, reply.answer),
      micros: reply.micros,
      envViewCalls: reply.viewCount,
      logs: reply.logs,
      addedBytes: added,
    });
    return reply.answer;
  }

  private record(r: HookRecord): void {
    this.records.push(r);
    this.last = r;
  }

  async _start(info: unknown): Promise<void> {
    try {
      await this.invoke("constructor", info);
    } catch (e) {
      if (!(e instanceof HookError)) throw e;
      this.record({ hook: "constructor", answer: null, intervened: false, micros: 0, envViewCalls: 0, logs: [], error: e });
      if (this.policy === "fail-closed") throw e;
    }
  }

  private async hook(hook: Layer, arg: any): Promise<any> {
    const [argType, answerType] = HOOK_TYPES[hook];
    const canonicalArg = toCanonical(argType, arg);
    if (!this.harness.layers.has(hook)) {
      // Switched off: not called, not recorded; the episode's tools are
      // still learned from the contract's input.
      if (hook === "contract" && this.tools === null) {
        this.tools = new Map((canonicalArg.tools as any[]).map((t) => [t.name, t.mutates]));
      }
      return fromCanonical(answerType!, NEUTRAL[hook](canonicalArg));
    }
    let answer: any;
    try {
      answer = await this.invoke(hook, canonicalArg);
    } catch (e) {
      if (!(e instanceof HookError)) throw e;
      const neutral = NEUTRAL[hook](canonicalArg);
      this.record({ hook, answer: neutral, intervened: false, micros: 0, envViewCalls: 0, logs: [], error: e });
      if (this.policy === "fail-open") return fromCanonical(answerType!, neutral);
      throw e;
    }
    return fromCanonical(answerType!, answer);
  }

  /** Environment contract: system prompt and tool descriptions. */
  contract(input: ContractInput): Promise<ContractOutput> {
    return this.hook("contract", input);
  }
  /** Procedural skills: guidance blocks. */
  skills(view: TaskView): Promise<Guidance[]> {
    return this.hook("skills", view);
  }
  /** Action realization: what happens to a proposed action. */
  realize(action: AgentAction): Promise<ActionDecision> {
    return this.hook("realize", action);
  }
  /** Trajectory regulation after a step. */
  regulate(report: StepReport): Promise<Regulation> {
    return this.hook("regulate", report);
  }

  /** Terminate the worker (the instance and its memory go with it). */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    await w?.terminate();
  }
}

