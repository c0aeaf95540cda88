// A plain tool-calling agent loop on the `openai` npm package, with a
// trained harness between it and the model: `ecdysis-host proxy` (the proxy
// guide, docs/src/guides/proxy.md). Nothing here knows about the harness;
// the one change is `baseURL`, which names the proxy instead of the model.
//
// Run: npm install openai@4.104.0 && node agent.mjs
// (AGENT_BASE_URL and AGENT_MODEL override the address and the model name.)
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.AGENT_BASE_URL ?? "http://127.0.0.1:8788/v1", // the proxy, not the model
  apiKey: process.env.OPENAI_API_KEY ?? "unused", // the proxy's, if it asks for one (--api-keys)
});
const MODEL = process.env.AGENT_MODEL ?? "qwen2.5-7b-instruct";

const ORDERS = { "#W1234567": { status: "delivered", items: ["water bottle"] } };

const FUNCTIONS = {
  get_order_details: ({ order_id }) =>
    ORDERS[order_id] ? JSON.stringify(ORDERS[order_id]) : `Error: no order ${order_id}`,
};
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_order_details",
      description: "Get the status and items of an order.",
      parameters: { type: "object", properties: { order_id: { type: "string" } }, required: ["order_id"] },
    },
  },
];

async function run(question, maxSteps = 10) {
  const messages = [
    { role: "system", content: "You are a customer service agent. Use the tools to look orders up." },
    { role: "user", content: question },
  ];
  for (let step = 0; step < maxSteps; step++) {
    const reply = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS });
    const message = reply.choices[0].message;
    messages.push(message);
    if (!message.tool_calls?.length) return message.content;
    for (const call of message.tool_calls) {
      // An unknown tool or arguments that are not JSON end this loop:
      // the harness's realize hook keeps such calls from reaching it.
      console.log(`tool: ${call.function.name}(${call.function.arguments})`);
      const result = FUNCTIONS[call.function.name](JSON.parse(call.function.arguments));
      messages.push({ role: "tool", tool_call_id: call.id, content: result });
    }
  }
  return null;
}

console.log("answer:", await run("Where is my order #W1234567?"));
