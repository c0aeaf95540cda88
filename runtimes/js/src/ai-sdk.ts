/**
 * Adapter for the Vercel AI SDK (`ai` on npm), the most widely used
 * TypeScript agent toolkit: its tool `execute` functions are the tool-call
 * hook (every call the model proposes runs through one), and its language
 * model middleware is the documented place to read and rewrite what a
 * model returned. With them, one episode of a harness drives a
 * `generateText` / `streamText` tool loop:
 *
 * - `harnessTools(episode, tools)`: each tool's `execute` asks `realize`
 *   first (proceed, execute a normalised call, or block with feedback as
 *   the tool result), then reports the outcome to `regulate` (an annotation
 *   is appended to the result the model reads; `stop` throws
 *   `HarnessStopped`);
 * - `harnessMiddleware(episode)`: a reply without tool calls goes through
 *   `realize` as text, so a call the model wrote as text becomes a real tool
 *   call (and a blocked text is replaced by the harness's note);
 * - `harnessContract(episode, system, tools)`: the system prompt and tool
 *   descriptions the model sees, from `contract`.
 */

import type { LanguageModelMiddleware, ToolSet } from "ai";

import type { Episode, ToolCall } from "./index.js";

/** The harness ended the episode (`stop` from `regulate`). */
export class HarnessStopped extends Error {
  constructor(readonly reason: string) {
    super(`the harness stopped the episode: ${reason}`);
    this.name = "HarnessStopped";
  }
}

const NOTE = "[Runtime harness note] ";

interface Counters {
  step: number;
  errors: number;
  maxSteps: number;
  maxErrors: number;
}

function schemaText(tool: any): string {
  const schema = tool?.inputSchema?.jsonSchema ?? tool?.inputSchema ?? tool?.parameters ?? {};
  try {
    return JSON.stringify(schema);
  } catch {
    return "{}";
  }
}

/** Run `contract` on a system prompt and an AI SDK tool set; returns the
 * prompt and the tools with the harness's descriptions. `mutating` names
 * the tools that change state (the env view never calls them). */
export async function harnessContract<T extends ToolSet>(
  episode: Episode,
  domain: string,
  system: string,
  tools: T,
  mutating: string[] = [],
): Promise<{ system: string; tools: T }> {
  const specs = Object.entries(tools).map(([name, t]: [string, any]) => ({
    name,
    description: t.description ?? "",
    parameters: schemaText(t),
    mutates: mutating.includes(name),
  }));
  const out = await episode.contract({ domain, systemPrompt: system, tools: specs });
  const described: Record<string, unknown> = {};
  for (const [name, t] of Object.entries(tools)) {
    const d = out.toolDescriptions.find((x) => x.name === name);
    described[name] = d ? { ...(t as object), description: d.description } : t;
  }
  return { system: out.systemPrompt, tools: described as T };
}

/** Wrap every tool's `execute` with `realize` before and `regulate` after. */
export function harnessTools<T extends ToolSet>(
  episode: Episode,
  tools: T,
  limits: { maxSteps?: number; maxErrors?: number } = {},
): T {
  const counters: Counters = { step: 0, errors: 0, maxSteps: limits.maxSteps ?? 200, maxErrors: limits.maxErrors ?? 10 };
  const run = async (name: string, input: unknown, options: any): Promise<unknown> => {
    const tool: any = (tools as any)[name];
    if (!tool?.execute) throw new Error(`tool ${name} has no execute function`);
    return tool.execute(input, options);
  };
  const wrapped: Record<string, unknown> = {};
  for (const [name, t] of Object.entries(tools) as Array<[string, any]>) {
    if (typeof t.execute !== "function") {
      wrapped[name] = t;
      continue;
    }
    wrapped[name] = {
      ...t,
      execute: async (input: unknown, options: any) => {
        let call: ToolCall = { id: options?.toolCallId ?? `call_${counters.step}`, name, arguments: JSON.stringify(input ?? {}) };
        const decision = await episode.realize({ tag: "call", val: call });
        let content: string;
        let error = false;
        let blocked = false;
        let result: unknown;
        if (decision.tag === "block") {
          blocked = true;
          result = content = `[Blocked by the runtime harness] ${decision.val}`;
        } else {
          if (decision.tag === "execute") call = { ...decision.val, id: call.id };
          try {
            result = await run(call.name, JSON.parse(call.arguments), options);
            content = typeof result === "string" ? result : JSON.stringify(result);
          } catch (e) {
            error = true;
            counters.errors += 1;
            result = content = `Error: ${(e as Error).message}`;
          }
        }
        counters.step += 1;
        const regulation = await episode.regulate({
          step: counters.step,
          stepsLeft: Math.max(0, counters.maxSteps - counters.step),
          errorsLeft: Math.max(0, counters.maxErrors - counters.errors),
          kind: "tool-results",
          text: undefined,
          outcomes: [{ call, content, error, blocked }],
        });
        if (regulation.tag === "stop") throw new HarnessStopped(regulation.val);
        if (regulation.tag === "annotate" || regulation.tag === "inject") {
          return `${content}\n\n${NOTE}${regulation.val}`;
        }
        return result;
      },
    };
  }
  return wrapped as T;
}

let rescued = 0;

/** Language-model middleware: a reply without tool calls is offered to
 * `realize` as text; a rescued call becomes a tool call the SDK runs. */
export function harnessMiddleware(episode: Episode): LanguageModelMiddleware {
  return {
    specificationVersion: "v4",
    wrapGenerate: async ({ doGenerate }: any) => {
      const result = await doGenerate();
      const content: any[] = result.content ?? [];
      if (content.some((p) => p.type === "tool-call")) return result;
      const text = content.filter((p) => p.type === "text").map((p) => p.text).join("");
      const decision = await episode.realize({ tag: "text", val: text });
      if (decision.tag === "realize") {
        const calls = decision.val.map((c) => ({
          type: "tool-call",
          toolCallId: `realized_${++rescued}`,
          toolName: c.name,
          input: c.arguments,
        }));
        return { ...result, content: calls, finishReason: { unified: "tool-calls", raw: "tool_calls" } };
      }
      if (decision.tag === "block") {
        return { ...result, content: [{ type: "text", text: `${NOTE}${decision.val}` }] };
      }
      return result;
    },
  } as unknown as LanguageModelMiddleware;
}
