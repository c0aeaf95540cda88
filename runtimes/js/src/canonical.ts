/**
 * The WIT types of ecdysis:harness@0.1.0 as descriptors, and conversion
 * between jco's JavaScript representation (the generated types: camelCase
 * records, `{tag, val}` variants, `undefined` for `none`) and the canonical
 * JSON of the Rust host's conformance vectors (kebab-case WIT field names in
 * WIT order, `{tag, val}` variants, `null` for `none`).
 */

export type Desc =
  | "string"
  | "bool"
  | "u32"
  | { record: Array<[string, Desc]> }
  | { variant: Record<string, Desc | null> }
  | { list: Desc }
  | { option: Desc }
  | { enum: string[] };

const toolCall: Desc = { record: [["id", "string"], ["name", "string"], ["arguments", "string"]] };
const toolSpec: Desc = {
  record: [["name", "string"], ["description", "string"], ["parameters", "string"], ["mutates", "bool"]],
};

export const TYPES = {
  episodeInfo: { record: [["domain", "string"], ["max-steps", "u32"], ["max-errors", "u32"]] } as Desc,
  contractInput: { record: [["domain", "string"], ["system-prompt", "string"], ["tools", { list: toolSpec }]] } as Desc,
  contractOutput: {
    record: [
      ["system-prompt", "string"],
      ["tool-descriptions", { list: { record: [["name", "string"], ["description", "string"]] } }],
    ],
  } as Desc,
  taskView: { record: [["domain", "string"], ["first-user-message", "string"]] } as Desc,
  guidanceList: { list: { record: [["title", "string"], ["text", "string"]] } } as Desc,
  agentAction: { variant: { call: toolCall, text: "string" } } as Desc,
  actionDecision: { variant: { proceed: null, execute: toolCall, block: "string", realize: { list: toolCall } } } as Desc,
  stepReport: {
    record: [
      ["step", "u32"],
      ["steps-left", "u32"],
      ["errors-left", "u32"],
      ["kind", { enum: ["agent-message", "tool-results", "user-message"] }],
      ["text", { option: "string" }],
      [
        "outcomes",
        {
          list: {
            record: [["call", toolCall], ["content", "string"], ["error", "bool"], ["blocked", "bool"]],
          },
        },
      ],
    ],
  } as Desc,
  regulation: {
    variant: { continue: null, annotate: "string", inject: "string", "force-call": toolCall, stop: "string" },
  } as Desc,
};

/** Argument and answer types of each hook. */
export const HOOK_TYPES: Record<string, [Desc, Desc | null]> = Object.assign(Object.create(null), {
  ["constructor"]: [TYPES.episodeInfo, null] as [Desc, Desc | null],
  contract: [TYPES.contractInput, TYPES.contractOutput],
  skills: [TYPES.taskView, TYPES.guidanceList],
  realize: [TYPES.agentAction, TYPES.actionDecision],
  regulate: [TYPES.stepReport, TYPES.regulation],
});

export function camel(name: string): string {
  return name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** jco value -> canonical JSON value. */
export function toCanonical(desc: Desc, v: any): any {
  if (typeof desc === "string") return v;
  if ("record" in desc) {
    const out: Record<string, any> = {};
    for (const [name, d] of desc.record) out[name] = toCanonical(d, v[camel(name)]);
    return out;
  }
  if ("variant" in desc) {
    const d = desc.variant[v.tag];
    if (d === undefined) throw new TypeError(`no case ${v.tag}`);
    return d === null ? { tag: v.tag } : { tag: v.tag, val: toCanonical(d, v.val) };
  }
  if ("list" in desc) return (v as any[]).map((x) => toCanonical(desc.list, x));
  if ("option" in desc) return v === undefined || v === null ? null : toCanonical(desc.option, v);
  return v; // enum
}

/** canonical JSON value -> jco value. */
export function fromCanonical(desc: Desc, v: any): any {
  if (typeof desc === "string") return v;
  if ("record" in desc) {
    const out: Record<string, any> = {};
    for (const [name, d] of desc.record) out[camel(name)] = fromCanonical(d, v[name]);
    return out;
  }
  if ("variant" in desc) {
    const d = desc.variant[v.tag];
    if (d === undefined) throw new TypeError(`no case ${v.tag}`);
    return d === null ? { tag: v.tag } : { tag: v.tag, val: fromCanonical(d, v.val) };
  }
  if ("list" in desc) return (v as any[]).map((x) => fromCanonical(desc.list, x));
  if ("option" in desc) return v === null || v === undefined ? undefined : fromCanonical(desc.option, v);
  return v;
}

/** Canonical JSON text: JSON.stringify of a canonical value is already
 * compact, in insertion order, with UTF-8 unescaped, as serde_json writes. */
export function canonicalDumps(v: unknown): string {
  return JSON.stringify(v);
}
