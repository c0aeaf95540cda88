// The Vercel AI SDK adapter: a deterministic mock model (the SDK's own
// MockLanguageModelV4) writes its tool call as text, as small models do;
// the harness middleware turns it into a real tool call the SDK executes
// through the harness-wrapped tool.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { generateText, jsonSchema, stepCountIs, tool, wrapLanguageModel } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { Harness } from "../dist/index.js";
import { harnessContract, harnessMiddleware, harnessTools } from "../dist/ai-sdk.js";
import { JS } from "./helpers.mjs";

const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
const reply = (text) => ({ content: [{ type: "text", text }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] });

function lookupTools(calls) {
  return {
    find_user_id_by_name_zip: tool({
      description: "Find a user id by name and zip.",
      inputSchema: jsonSchema({ type: "object", properties: { first_name: { type: "string" }, last_name: { type: "string" }, zip: { type: "string" } } }),
      execute: async (input) => {
        calls.push(input);
        return "yusuf_rossi_9620";
      },
    }),
  };
}

async function converse(useHarness) {
  const calls = [];
  let turn = 0;
  const mock = new MockLanguageModelV4({
    doGenerate: async () =>
      turn++ === 0
        ? reply('```json\n{"name": "find_user_id_by_name_zip", "arguments": {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}}\n```')
        : reply("Your user id is yusuf_rossi_9620."),
  });
  let tools = lookupTools(calls);
  let model = mock;
  let system = "You are a retail agent.";
  let ep = null;
  if (useHarness) {
    const harness = await Harness.load(join(JS, "template"));
    ep = await harness.episode("tau2/retail", 200, 10);
    ({ system, tools } = await harnessContract(ep, "tau2/retail", system, tools));
    tools = harnessTools(ep, tools);
    model = wrapLanguageModel({ model: mock, middleware: harnessMiddleware(ep) });
  }
  const result = await generateText({ model, system, prompt: "What is my user id? I'm Yusuf Rossi, 19122.", tools, stopWhen: stepCountIs(4) });
  await ep?.close();
  return { calls, result, ep };
}

test("the harness rescues a text-written call and the SDK executes it", async () => {
  const { calls, result, ep } = await converse(true);
  assert.deepEqual(calls, [{ first_name: "Yusuf", last_name: "Rossi", zip: "19122" }]);
  assert.equal(result.text, "Your user id is yusuf_rossi_9620.");
  const hooks = ep.records.map((r) => `${r.hook}:${r.answer?.tag ?? ""}`);
  assert.ok(hooks.includes("realize:realize"), hooks.join(" "));
  assert.ok(hooks.includes("regulate:continue"), hooks.join(" "));
});

test("without the harness the text call never runs", async () => {
  const { calls, result } = await converse(false);
  assert.deepEqual(calls, []);
  assert.match(result.text, /find_user_id_by_name_zip/);
});
