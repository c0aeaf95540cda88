/**
 * The Rust host's answer checks (host/sandbox/src/sandbox/contract.rs), in the same
 * order, on canonical JSON answers; and JSON-object arguments judged as
 * serde_json judges them (besides what JSON.parse refuses: non-finite
 * numbers, lone surrogates, nesting deeper than 127 levels). The reason
 * text of `arguments_not_object` is this parser's, not serde_json's.
 */

import { ContractViolation } from "./errors.js";

export const MAX_LIST_ITEMS = 256;
export const MAX_JSON_DEPTH = 127;
/** Cap on a harness-written call's arguments in UTF-8 bytes (env/mod.rs
 * MAX_TOOL_ARGUMENT_BYTES): the call runs after the hook returned, outside
 * its deadline, so its size is bounded like an env-view call's. */
export const MAX_TOOL_ARGUMENT_BYTES = 64 * 1024;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function utf8Len(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

/** The arguments an env-view call is logged with (recorder.rs
 * `logged_arguments`): as passed, or a marker for a text over the cap, so
 * the log never keeps 64 x the guest's memory. */
export function loggedArguments(args: string): string {
  const bytes = utf8Len(args);
  return bytes > MAX_TOOL_ARGUMENT_BYTES ? `<${bytes} bytes, over the cap of ${MAX_TOOL_ARGUMENT_BYTES}>` : args;
}

function walk(v: unknown, depth: number): void {
  if (typeof v === "number" && !Number.isFinite(v)) throw new Error("number out of range");
  if (typeof v === "string") {
    if (LONE_SURROGATE.test(v)) throw new Error("lone surrogate in hex escape");
    return;
  }
  if (v && typeof v === "object") {
    if (depth > MAX_JSON_DEPTH) throw new Error("recursion limit exceeded");
    for (const [k, x] of Object.entries(v)) {
      if (!Array.isArray(v) && LONE_SURROGATE.test(k)) throw new Error("lone surrogate in hex escape");
      walk(x, depth + 1);
    }
  }
}

/** Parse JSON text as serde_json would accept it, or throw with the reason. */
export function parseJson(text: string): unknown {
  const v = JSON.parse(text);
  walk(v, 1);
  return v;
}

export function jsonKind(v: unknown): string {
  if (v === null) return "null";
  if (typeof v === "boolean") return "a boolean";
  if (typeof v === "number") return "a number";
  if (typeof v === "string") return "a string";
  if (Array.isArray(v)) return "an array";
  return "an object";
}

export function argumentsObject(text: string): [Record<string, unknown> | null, string] {
  let v: unknown;
  try {
    v = parseJson(text);
  } catch (e) {
    return [null, (e as Error).message];
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) return [null, `got ${jsonKind(v)}`];
  return [v as Record<string, unknown>, ""];
}

type Call = { id: string; name: string; arguments: string };

export function checkCall(call: Call, tools: Set<string>): void {
  if (call.id === "") throw new ContractViolation("empty_call_id", "call id is empty");
  if (!tools.has(call.name)) throw new ContractViolation("unknown_tool", `call names unknown tool \`${call.name}\``);
  const bytes = utf8Len(call.arguments);
  if (bytes > MAX_TOOL_ARGUMENT_BYTES) {
    throw new ContractViolation(
      "arguments_too_large",
      `arguments of \`${call.name}\` are ${bytes} bytes, over the cap of ${MAX_TOOL_ARGUMENT_BYTES}`,
    );
  }
  const [args, reason] = argumentsObject(call.arguments);
  if (args === null) {
    throw new ContractViolation(
      "arguments_not_object",
      `arguments of \`${call.name}\` are not a JSON object: ${reason}`,
    );
  }
}

function items(n: number): void {
  if (n > MAX_LIST_ITEMS) {
    throw new ContractViolation("too_many_items", `hook returned ${n} list items, over the cap of ${MAX_LIST_ITEMS}`);
  }
}

function size(n: number, cap: number): void {
  if (n > cap) throw new ContractViolation("output_too_large", `hook returned ${n} bytes of text, over the cap of ${cap}`);
}

const callBytes = (c: Call) => utf8Len(c.id) + utf8Len(c.name) + utf8Len(c.arguments);

/** Bytes of text a checked answer puts in front of the model, counted as
 * the Rust host counts them (`sandbox::added`). */
export function addedBytes(hook: string, arg: any, answer: any): number {
  if (hook === "contract") {
    const before = new Map<string, number>(
      (arg.tools as Array<{ name: string; description: string }>).map((t) => [t.name, utf8Len(t.description)]),
    );
    const prompt = Math.max(0, utf8Len(answer["system-prompt"]) - utf8Len(arg["system-prompt"]));
    const tools = (answer["tool-descriptions"] as Array<{ name: string; description: string }>).reduce(
      (n, d) => n + Math.max(0, utf8Len(d.description) - (before.get(d.name) ?? 0)),
      0,
    );
    return prompt + tools;
  }
  if (hook === "skills") return answer.reduce((n: number, g: any) => n + utf8Len(g.title) + utf8Len(g.text), 0);
  if (hook !== "realize" && hook !== "regulate") return 0;
  const tag = answer.tag as string;
  if (tag === "execute" || tag === "force-call") return utf8Len(answer.val.arguments);
  if (tag === "block" || tag === "annotate" || tag === "inject") return utf8Len(answer.val);
  if (tag === "realize") return (answer.val as Call[]).reduce((n, c) => n + utf8Len(c.arguments), 0);
  return 0;
}

/** The episode's added text stays within its budget; throws ContractViolation. */
export function checkAdded(total: number, limit: number): void {
  if (total > limit) {
    throw new ContractViolation(
      "added_text_over_budget",
      `the harness has added ${total} bytes of text to the model's input this episode, over the budget of ${limit}`,
    );
  }
}

/** Check a hook's canonical answer; throws ContractViolation. */
export function checkAnswer(hook: string, arg: any, answer: any, tools: Set<string>, cap: number): void {
  if (hook === "contract") {
    const ds = answer["tool-descriptions"] as Array<{ name: string; description: string }>;
    items(ds.length);
    size(utf8Len(answer["system-prompt"]) + ds.reduce((n, d) => n + utf8Len(d.name) + utf8Len(d.description), 0), cap);
    for (const d of ds) {
      if (!tools.has(d.name)) {
        throw new ContractViolation("unknown_tool_description", `contract rewrites unknown tool \`${d.name}\``);
      }
    }
  } else if (hook === "skills") {
    items(answer.length);
    size(answer.reduce((n: number, g: any) => n + utf8Len(g.title) + utf8Len(g.text), 0), cap);
  } else if (hook === "realize") {
    const kind = arg.tag as string;
    const tag = answer.tag as string;
    if (tag === "proceed") return;
    if (tag === "block") return size(utf8Len(answer.val), cap);
    if (tag === "execute" && kind === "call") {
      size(callBytes(answer.val), cap);
      return checkCall(answer.val, tools);
    }
    if (tag === "realize" && kind === "text") {
      const calls = answer.val as Call[];
      items(calls.length);
      size(calls.reduce((n, c) => n + callBytes(c), 0), cap);
      if (calls.length === 0) throw new ContractViolation("empty_realization", "realize returned no calls");
      for (const c of calls) checkCall(c, tools);
      return;
    }
    throw new ContractViolation("decision_for_wrong_action", `\`${tag}\` is not a valid answer to a ${kind} action`);
  } else if (hook === "regulate") {
    const tag = answer.tag as string;
    if (tag === "continue") return;
    if (tag === "annotate" || tag === "inject" || tag === "stop") return size(utf8Len(answer.val), cap);
    size(callBytes(answer.val), cap);
    checkCall(answer.val, tools);
  }
}
