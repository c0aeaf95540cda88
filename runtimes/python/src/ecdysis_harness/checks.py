"""The answer checks of the Rust host (host/sandbox/src/sandbox/contract.rs), applied
in the same order to the canonical JSON of every answer, so the same answer
is refused with the same violation kind in every runtime.

JSON-object arguments are judged as Rust's `serde_json` judges them: besides
what Python's parser refuses, non-finite numbers (`NaN`, `1e400`), lone
surrogate escapes and nesting deeper than 127 levels are not JSON. The
`reason` text of `arguments_not_object` is this parser's, not serde_json's.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Optional, Set, Tuple

from .errors import ContractViolation

#: Cap on the items of any list a hook returns (contract.rs MAX_LIST_ITEMS).
MAX_LIST_ITEMS = 256
#: Cap on a harness-written call's arguments, in UTF-8 bytes (env/mod.rs
#: MAX_TOOL_ARGUMENT_BYTES): the call runs after the hook returned, outside
#: its deadline, so its size is bounded like an env-view call's.
MAX_TOOL_ARGUMENT_BYTES = 64 * 1024
#: serde_json's nesting limit: 127 levels parse, 128 do not.
MAX_JSON_DEPTH = 127
_F64_MAX = 1.7976931348623157e308


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def logged_arguments(arguments: str) -> str:
    """The arguments an env-view call is logged with (recorder.rs
    `logged_arguments`): as passed, or a marker for a text over the cap, so
    the log never keeps 64 x the guest's memory."""
    size = utf8_len(arguments)
    if size > MAX_TOOL_ARGUMENT_BYTES:
        return f"<{size} bytes, over the cap of {MAX_TOOL_ARGUMENT_BYTES}>"
    return arguments


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotJson("number out of range")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)
    if abs(value) > _F64_MAX:
        raise _NotJson("number out of range")
    return value


def _walk(value: Any, depth: int) -> None:
    if isinstance(value, (dict, list)):
        if depth > MAX_JSON_DEPTH:
            raise _NotJson("recursion limit exceeded")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            if isinstance(k, str):
                _check_text(k)
            _walk(v, depth + 1)
    elif isinstance(value, str):
        _check_text(value)


def _check_text(s: str) -> None:
    for ch in s:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise _NotJson("lone surrogate in hex escape")


def parse_json(text: str) -> Any:
    """Parse JSON text the way serde_json would accept it, or raise
    ValueError with the reason."""
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except RecursionError:
        raise ValueError("recursion limit exceeded") from None
    _walk(value, 1)
    return value


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def arguments_object(text: str) -> Tuple[Optional[dict], str]:
    """The arguments as a dict, or `(None, reason)`."""
    try:
        value = parse_json(text)
    except ValueError as e:
        return None, str(e)
    if not isinstance(value, dict):
        return None, f"got {json_kind(value)}"
    return value, ""


def _violation(kind: str, message: str) -> ContractViolation:
    return ContractViolation(kind, message)


def check_call(call: dict, tools: Set[str]) -> None:
    if call["id"] == "":
        raise _violation("empty_call_id", "call id is empty")
    if call["name"] not in tools:
        raise _violation("unknown_tool", f"call names unknown tool `{call['name']}`")
    size = utf8_len(call["arguments"])
    if size > MAX_TOOL_ARGUMENT_BYTES:
        raise _violation(
            "arguments_too_large",
            f"arguments of `{call['name']}` are {size} bytes, over the cap of {MAX_TOOL_ARGUMENT_BYTES}",
        )
    args, reason = arguments_object(call["arguments"])
    if args is None:
        raise _violation(
            "arguments_not_object",
            f"arguments of `{call['name']}` are not a JSON object: {reason}",
        )


def _items(n: int) -> None:
    if n > MAX_LIST_ITEMS:
        raise _violation(
            "too_many_items", f"hook returned {n} list items, over the cap of {MAX_LIST_ITEMS}"
        )


def _size(n: int, cap: int) -> None:
    if n > cap:
        raise _violation(
            "output_too_large", f"hook returned {n} bytes of text, over the cap of {cap}"
        )


def _call_bytes(c: dict) -> int:
    return utf8_len(c["id"]) + utf8_len(c["name"]) + utf8_len(c["arguments"])


def check_contract(out: dict, tools: Set[str], cap: int) -> None:
    descriptions = out["tool-descriptions"]
    _items(len(descriptions))
    _size(
        utf8_len(out["system-prompt"])
        + sum(utf8_len(d["name"]) + utf8_len(d["description"]) for d in descriptions),
        cap,
    )
    for d in descriptions:
        if d["name"] not in tools:
            raise _violation(
                "unknown_tool_description", f"contract rewrites unknown tool `{d['name']}`"
            )


def check_skills(out: list, cap: int) -> None:
    _items(len(out))
    _size(sum(utf8_len(g["title"]) + utf8_len(g["text"]) for g in out), cap)


def check_decision(action: dict, decision: dict, tools: Set[str], cap: int) -> None:
    kind = action["tag"]
    tag = decision["tag"]
    if tag == "proceed":
        return
    if tag == "block":
        _size(utf8_len(decision["val"]), cap)
        return
    if tag == "execute" and kind == "call":
        _size(_call_bytes(decision["val"]), cap)
        check_call(decision["val"], tools)
        return
    if tag == "realize" and kind == "text":
        calls = decision["val"]
        _items(len(calls))
        _size(sum(_call_bytes(c) for c in calls), cap)
        if not calls:
            raise _violation("empty_realization", "realize returned no calls")
        for c in calls:
            check_call(c, tools)
        return
    raise _violation(
        "decision_for_wrong_action", f"`{tag}` is not a valid answer to a {kind} action"
    )


def check_regulation(r: dict, tools: Set[str], cap: int) -> None:
    tag = r["tag"]
    if tag == "continue":
        return
    if tag in ("annotate", "inject", "stop"):
        _size(utf8_len(r["val"]), cap)
        return
    _size(_call_bytes(r["val"]), cap)
    check_call(r["val"], tools)


def added_bytes(hook: str, argument: Any, answer: Any) -> int:
    """Bytes of text a checked answer puts in front of the model, counted
    as the Rust host counts them (`sandbox::added`)."""
    if hook == "contract":
        before = {t["name"]: utf8_len(t["description"]) for t in argument["tools"]}
        prompt = max(0, utf8_len(answer["system-prompt"]) - utf8_len(argument["system-prompt"]))
        tools = sum(
            max(0, utf8_len(d["description"]) - before.get(d["name"], 0))
            for d in answer["tool-descriptions"]
        )
        return prompt + tools
    if hook == "skills":
        return sum(utf8_len(g["title"]) + utf8_len(g["text"]) for g in answer)
    if hook not in ("realize", "regulate"):
        return 0
    tag = answer["tag"]
    if hook == "realize":
        if tag == "execute":
            return utf8_len(answer["val"]["arguments"])
        if tag == "block":
            return utf8_len(answer["val"])
        if tag == "realize":
            return sum(utf8_len(c["arguments"]) for c in answer["val"])
        return 0
    if tag in ("annotate", "inject"):
        return utf8_len(answer["val"])
    if tag == "force-call":
        return utf8_len(answer["val"]["arguments"])
    return 0


def check_added(total: int, limit: int) -> None:
    """The episode's added text stays within its budget."""
    if total > limit:
        raise _violation(
            "added_text_over_budget",
            f"the harness has added {total} bytes of text to the model's input this episode, over the budget of {limit}",
        )


def tool_names(tools: Iterable[dict]) -> Set[str]:
    return {t["name"] for t in tools}
