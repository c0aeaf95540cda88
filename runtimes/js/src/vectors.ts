/**
 * Replay the Rust host's conformance vectors (`ecdysis-host vectors`) and
 * demand byte-identical lines (see host/runner/src/vectors.rs for the format).
 */

import { readFileSync } from "node:fs";

import { canonicalDumps } from "./canonical.js";
import { parseJson } from "./checks.js";
import { ContractViolation, HookError, VectorMismatch } from "./errors.js";
import { Episode, type Harness } from "./index.js";

export const VECTORS_FORMAT = "ecdysis-hook-vectors/1";

function isDeepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Answers env-view calls from the current line's recorded calls. */
class RecordedView {
  calls: any[] = [];
  used: boolean[] = [];
  load(calls: any[]): void {
    this.calls = calls;
    this.used = calls.map(() => false);
  }
  answer = (name: string, args: Record<string, unknown>) => {
    for (let i = 0; i < this.calls.length; i++) {
      const c = this.calls[i];
      if (this.used[i] || c.name !== name) continue;
      let same = false;
      try {
        same = isDeepEqual(parseJson(c.arguments), args);
      } catch {
        same = false;
      }
      if (same && (c.answer.tag === "ok" || c.answer.val.tag === "tool-error")) {
        this.used[i] = true;
        return c.answer.tag === "ok" ? c.answer.val : { content: c.answer.val.val, error: true };
      }
    }
    return { content: `replay: \`${name}\` with these arguments is not in the recording`, error: true };
  };
}

function errorOutput(e: HookError): unknown {
  const val: Record<string, unknown> = { kind: e.kind };
  if (e instanceof ContractViolation) val.violation = e.violation;
  return { tag: "err", val };
}

export interface ReplayReport {
  header: any;
  records: number;
  episodes: number;
}

/** Replay a vector file against `harness`; rejects with VectorMismatch at
 * the first record whose replayed line differs, showing both lines.
 * `timings` collects the seconds of each hook call by hook name. */
export async function replay(
  harness: Harness,
  path: string,
  timings?: Record<string, number[]>,
): Promise<ReplayReport> {
  const lines = readFileSync(path, "utf8").split("\n").filter((l) => l.length > 0);
  const header = JSON.parse(lines[0] ?? "{}");
  if (header.format !== VECTORS_FORMAT) throw new VectorMismatch(`${path}: format ${header.format}, expected ${VECTORS_FORMAT}`);
  if (header.harness !== harness.hash) throw new VectorMismatch(`${path} was recorded for harness ${header.harness}, not ${harness.hash}`);
  const view = new RecordedView();
  let ep: Episode | null = null;
  let episodes = 0;
  try {
    for (let n = 1; n < lines.length; n++) {
      const recorded = lines[n];
      const r = JSON.parse(recorded);
      view.load(r.view_calls);
      let output: unknown;
      if (r.hook === "constructor") {
        await ep?.close();
        episodes += 1;
        ep = new Episode(harness, view.answer, undefined, harness.policy);
        await ep._boot((harness as any).harnessJs, (harness as any).modules, (harness as any).imports);
      }
      if (!ep) throw new VectorMismatch(`${path}:${n + 1}: a hook line before its constructor`);
      const started = performance.now();
      try {
        output = { tag: "ok", val: await ep.invoke(r.hook, r.input) };
      } catch (e) {
        if (!(e instanceof HookError)) throw e;
        output = errorOutput(e);
      }
      // The whole API call: the worker round trip, the guest, the checks.
      if (timings) {
        if (!Object.hasOwn(timings, r.hook)) timings[r.hook] = [];
        timings[r.hook].push((performance.now() - started) / 1000);
      }
      const replayed = canonicalDumps({
        episode: r.episode,
        task: r.task,
        trial: r.trial,
        seq: r.seq,
        hook: r.hook,
        input: r.input,
        view_calls: ep.viewLog,
        output,
      });
      if (replayed !== recorded) {
        let at = 0;
        while (at < recorded.length && recorded[at] === replayed[at]) at++;
        throw new VectorMismatch(
          `${path}:${n + 1}: episode ${r.episode} (task ${r.task} trial ${r.trial}) hook #${r.seq} \`${r.hook}\` differs at byte ${at}:\n` +
            `  recorded: ${recorded}\n  replayed: ${replayed}`,
        );
      }
    }
  } finally {
    await ep?.close();
  }
  return { header, records: lines.length - 1, episodes };
}
