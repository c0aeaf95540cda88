// A harness written in JavaScript, built with componentize-js
// (scripts/js-harness.sh). It states one interface rule in the system prompt
// and turns a call written as fenced JSON text into the structured call.
const RULE = "\n\n- Call tools only with structured tool calls; never write a call as JSON in your message.";

export const hooks = {
  Episode: class Episode {
    constructor(info) {
      this.tools = new Set();
    }
    contract(input) {
      for (const t of input.tools) this.tools.add(t.name);
      return { systemPrompt: input.systemPrompt + RULE, toolDescriptions: [] };
    }
    skills(view) {
      return [];
    }
    realize(action) {
      if (action.tag !== "text") return { tag: "proceed" };
      const m = /```(?:json)?\s*\n([\s\S]*?)```/.exec(action.val);
      if (!m) return { tag: "proceed" };
      try {
        const obj = JSON.parse(m[1]);
        if (typeof obj.name === "string" && this.tools.has(obj.name) && obj.arguments && typeof obj.arguments === "object") {
          return { tag: "realize", val: [{ id: "text_call", name: obj.name, arguments: JSON.stringify(obj.arguments) }] };
        }
      } catch (e) {}
      return { tag: "proceed" };
    }
    regulate(report) {
      return { tag: "continue" };
    }
  },
};
