"""A conversation through the proxy with the `openai` Python SDK (the
client agents use), for `sdk_openai_python_client_through_the_proxy`.

Usage: python openai_client.py BASE_URL. Prints one JSON object with what
the SDK received; the Rust test checks it against the scripted upstream.
With ECDYSIS_SDK_PAUSE=1 it says "paused" on stderr before the last turn and
waits for a line on stdin.
"""

import json
import os
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="client-key-not-forwarded")
tools = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Get the status and details of an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]
messages = [
    {"role": "system", "content": "You are a helpful customer service agent."},
    {"role": "user", "content": "Where is my order #W1234567?"},
]
seen = {"models": [m.id for m in client.models.list()]}

first = client.chat.completions.create(model="mock-model", messages=messages, tools=tools)
call = first.choices[0].message.tool_calls[0]
seen["first"] = {
    "finish_reason": first.choices[0].finish_reason,
    "call": [call.id, call.function.name, json.loads(call.function.arguments)],
}
# The SDK's own message object goes back into the history, as agents do.
messages.append(first.choices[0].message)
messages.append({"role": "tool", "tool_call_id": call.id, "content": "Error: order not found"})

stream = client.chat.completions.create(
    model="mock-model",
    messages=messages,
    tools=tools,
    stream=True,
    stream_options={"include_usage": True},
)
calls, finish, usage = {}, None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage.total_tokens
    if not chunk.choices:
        continue
    for tc in chunk.choices[0].delta.tool_calls or []:
        calls[tc.index] = [tc.id, tc.function.name, json.loads(tc.function.arguments)]
    finish = chunk.choices[0].finish_reason or finish
seen["second"] = {"finish_reason": finish, "calls": list(calls.values()), "usage": usage}
messages.append(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": c[0], "type": "function", "function": {"name": c[1], "arguments": json.dumps(c[2])}}
            for c in calls.values()
        ],
    }
)
messages.append({"role": "tool", "tool_call_id": calls[0][0], "content": "Error: order not found"})

# With ECDYSIS_SDK_PAUSE=1 the client waits here (a line on stdin) while the
# test replaces the proxy with a fresh one: the last turn is then replayed.
if os.environ.get("ECDYSIS_SDK_PAUSE") == "1":
    print("paused", file=sys.stderr, flush=True)
    sys.stdin.readline()
last = client.chat.completions.create(model="mock-model", messages=messages, tools=tools)
seen["third"] = {"finish_reason": last.choices[0].finish_reason, "content": last.choices[0].message.content}
print(json.dumps(seen))
