// The conversation of openai_client.py with the `openai` npm package, for
// `sdk_openai_node_client_through_the_proxy`. Usage: node openai_client.mjs
// BASE_URL (with NODE_PATH naming a node_modules that holds `openai`).
// Prints one JSON object with what the SDK received.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { default: OpenAI } = await import(require.resolve("openai", { paths: (process.env.NODE_PATH || "").split(":") }));

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "client-key-not-forwarded" });
const tools = [
  {
    type: "function",
    function: {
      name: "get_order_details",
      description: "Get the status and details of an order.",
      parameters: { type: "object", properties: { order_id: { type: "string" } }, required: ["order_id"] },
    },
  },
];
const messages = [
  { role: "system", content: "You are a helpful customer service agent." },
  { role: "user", content: "Where is my order #W1234567?" },
];
const seen = { models: [] };
for await (const m of client.models.list()) seen.models.push(m.id);

const first = await client.chat.completions.create({ model: "mock-model", messages, tools });
const call = first.choices[0].message.tool_calls[0];
seen.first = {
  finish_reason: first.choices[0].finish_reason,
  call: [call.id, call.function.name, JSON.parse(call.function.arguments)],
};
messages.push(first.choices[0].message);
messages.push({ role: "tool", tool_call_id: call.id, content: "Error: order not found" });

const stream = await client.chat.completions.create({
  model: "mock-model",
  messages,
  tools,
  stream: true,
  stream_options: { include_usage: true },
});
const calls = [];
let finish = null;
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage.total_tokens;
  const choice = chunk.choices[0];
  if (!choice) continue;
  for (const tc of choice.delta.tool_calls || []) {
    calls[tc.index] = [tc.id, tc.function.name, JSON.parse(tc.function.arguments)];
  }
  finish = choice.finish_reason || finish;
}
seen.second = { finish_reason: finish, calls, usage };
messages.push({
  role: "assistant",
  content: null,
  tool_calls: calls.map(([id, name, args]) => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } })),
});
messages.push({ role: "tool", tool_call_id: calls[0][0], content: "Error: order not found" });

// With ECDYSIS_SDK_PAUSE=1 the client waits here (a line on stdin) while the
// test replaces the proxy with a fresh one: the last turn is then replayed.
if (process.env.ECDYSIS_SDK_PAUSE === "1") {
  process.stderr.write("paused\n");
  await new Promise((resolve) => process.stdin.once("data", resolve));
  process.stdin.pause();
}
const last = await client.chat.completions.create({ model: "mock-model", messages, tools });
seen.third = { finish_reason: last.choices[0].finish_reason, content: last.choices[0].message.content };
console.log(JSON.stringify(seen));
