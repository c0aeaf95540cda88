"""A plain tool-calling agent loop on the `openai` client, with a trained
harness between it and the model: `ecdysis-host proxy` (the proxy guide,
docs/src/guides/proxy.md). Nothing here knows about the harness; the one
change is `base_url`, which names the proxy instead of the model.

Run: pip install openai==1.109.1 && python agent.py
(AGENT_BASE_URL and AGENT_MODEL override the address and the model name.)
"""

import json
import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("AGENT_BASE_URL", "http://127.0.0.1:8788/v1"),  # the proxy, not the model
    api_key=os.environ.get("OPENAI_API_KEY", "unused"),  # the proxy's, if it asks for one (--api-keys)
)
MODEL = os.environ.get("AGENT_MODEL", "qwen2.5-7b-instruct")

ORDERS = {"#W1234567": {"status": "delivered", "items": ["water bottle"]}}


def get_order_details(order_id):
    order = ORDERS.get(order_id)
    return json.dumps(order) if order else f"Error: no order {order_id}"


FUNCTIONS = {"get_order_details": get_order_details}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Get the status and items of an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]


def run(question, max_steps=10):
    messages = [
        {"role": "system", "content": "You are a customer service agent. Use the tools to look orders up."},
        {"role": "user", "content": question},
    ]
    for _ in range(max_steps):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            # An unknown tool or arguments that are not JSON end this loop:
            # the harness's realize hook keeps such calls from reaching it.
            print(f"tool: {call.function.name}({call.function.arguments})")
            result = FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


print("answer:", run("Where is my order #W1234567?"))
