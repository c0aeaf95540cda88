"""The four layers of the Python starting harness, as plain Python over
plain data: `hooks.py` adapts the WIT types to these and back, so the rules
run (and are unit-tested with pytest) without a component.

Every rule reads its knobs from `tables.py`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import tables


def short_domain(domain: str) -> str:
    """`tau2/retail` -> `retail`."""
    return domain.rsplit("/", 1)[-1]


def for_domain(rows, domain: str):
    """The rows of a table whose first field is `domain` or `*`."""
    d = short_domain(domain)
    return [r for r in rows if r[0] in (d, "*")]


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Decision:
    """`proceed`, `execute` (call), `block` (text) or `realize` (calls)."""

    kind: str
    call: Call | None = None
    text: str = ""
    calls: tuple = ()


PROCEED = Decision("proceed")


@dataclass(frozen=True)
class Regulation:
    """`continue`, `annotate` (text), `inject` (text) or `stop` (text)."""

    kind: str
    text: str = ""


CONTINUE = Regulation("continue")


@dataclass(frozen=True)
class Outcome:
    call: Call
    content: str
    error: bool
    blocked: bool = False


# -- environment contract -------------------------------------------------


def contract(domain: str, system_prompt: str, tools: list[tuple[str, str]]):
    """The new system prompt and `(tool, description)` changes, from the
    prompt and the `(name, description)` of every tool."""
    rules = [text for _, text in for_domain(tables.PROMPT_RULES, domain)]
    prompt = system_prompt
    if rules:
        prompt += "\n\n" + tables.PROMPT_RULES_TITLE + "\n" + "\n".join(f"- {r}" for r in rules)
    names = dict(tools)
    changes = []
    for _, tool, hint in for_domain(tables.TOOL_HINTS, domain):
        if tool in names:
            changes.append((tool, f"{names[tool]}\n\n{tables.TOOL_HINT_PREFIX} {hint}"))
    return prompt, changes


# -- skills ---------------------------------------------------------------

WORD = re.compile(r"[a-z0-9]+")


def skills(domain: str, first_user_message: str) -> list[tuple[str, str]]:
    """`(title, text)` of the skills whose keywords the message hits most
    (at least `SKILL_MIN_HITS` distinct keywords, best first, ties in table
    order)."""
    words = set(WORD.findall(first_user_message.lower()))
    scored = []
    for index, (_, title, text, keywords) in enumerate(for_domain(tables.SKILLS, domain)):
        hits = len(words & set(keywords.split()))
        if hits >= tables.SKILL_MIN_HITS:
            scored.append((-hits, index, title, text))
    scored.sort()
    return [(title, text) for _, _, title, text in scored[: tables.SKILL_LIMIT]]


# -- action realization ---------------------------------------------------


def realize_call(domain: str, call: Call, tools: set[str]) -> Decision:
    """Repair or block a structured call; `proceed` when it is fine."""
    name = call.name
    if name not in tools:
        alias = {a: t for _, a, t in for_domain(tables.TOOL_ALIASES, domain)}.get(name)
        if alias in tools:
            name = alias
        else:
            listed = ", ".join(sorted(tools))
            return Decision("block", text=tables.MESSAGES["unknown_tool"].format(name=name, tools=listed))
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as e:
        return Decision("block", text=tables.MESSAGES["bad_arguments"].format(error=e.msg))
    if isinstance(args, str):
        # Arguments sent as the text of a JSON object inside a string.
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return Decision("block", text=tables.MESSAGES["bad_arguments"].format(error=e.msg))
    if not isinstance(args, dict):
        return Decision("block", text=tables.MESSAGES["bad_arguments"].format(error="not an object"))
    fixed = dict(args)
    for _, arg, prefix in for_domain(tables.ID_PREFIXES, domain):
        value = fixed.get(arg)
        if isinstance(value, str) and value and not value.startswith(prefix):
            fixed[arg] = prefix + value
    for _, arg in for_domain(tables.NUMERIC_ARGS, domain):
        value = fixed.get(arg)
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                continue
            fixed[arg] = int(number) if number.is_integer() and "." not in value else number
    if name == "commit_final_answer" and "answers" in fixed:
        answers = fixed["answers"]
        if isinstance(answers, str):
            fixed["answers"] = [answers]
        elif not isinstance(answers, list):
            return Decision("block", text=tables.MESSAGES["answers_not_list"].format(answers=json.dumps(answers)))
    if name == call.name and fixed == args and isinstance(json.loads(call.arguments or "{}"), dict):
        return PROCEED
    return Decision("execute", call=Call(call.id, name, json.dumps(fixed)))


FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)


def _call_from_object(obj, tools: set[str], domain: str) -> Call | None:
    if not isinstance(obj, dict):
        return None
    name = next((obj[k] for k in tables.TEXT_CALL_NAME_KEYS if isinstance(obj.get(k), str)), None)
    if name is None:
        return None
    aliases = {a: t for _, a, t in for_domain(tables.TOOL_ALIASES, domain)}
    name = name if name in tools else aliases.get(name, name)
    if name not in tools:
        return None
    args = next((obj[k] for k in tables.TEXT_CALL_ARGUMENT_KEYS if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return Call("text_call", name, json.dumps(args))


def _json_objects(text: str):
    """Every top-level JSON object in `text`, in order."""
    decoder = json.JSONDecoder()
    i = 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        yield obj
        i = end


def realize_text(domain: str, text: str, tools: set[str]) -> Decision:
    """A message that holds a call written as text (a fenced JSON object,
    a `<tool_call>` tag, bare JSON, or a fenced code block of a code tool)
    becomes that call; any other text proceeds."""
    calls = []
    for lang, body in FENCE.findall(text):
        for _, fence, tool, arg in for_domain(tables.CODE_RESCUE, domain):
            if lang.lower() == fence and tool in tools and body.strip():
                calls.append(Call("text_call", tool, json.dumps({arg: body.strip()})))
    if not calls:
        pieces = [body for _, body in FENCE.findall(text)]
        for tag in tables.TEXT_CALL_TAGS:
            pieces += re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.S)
        pieces.append(text)
        for piece in pieces:
            found = [c for c in (_call_from_object(o, tools, domain) for o in _json_objects(piece)) if c]
            if found:
                calls = found
                break
    if not calls:
        return PROCEED
    return Decision("realize", calls=tuple(calls))


# -- trajectory regulation ------------------------------------------------


@dataclass
class Regulator:
    """Counts failed calls and error streaks across an episode."""

    failures: dict = field(default_factory=dict)
    streak: int = 0

    def after_tools(self, outcomes: list[Outcome]) -> Regulation:
        note = None
        for o in outcomes:
            if o.error and not o.blocked:
                key = (o.call.name, _canonical(o.call.arguments))
                self.failures[key] = self.failures.get(key, 0) + 1
                self.streak += 1
                times = self.failures[key]
                if times >= tables.REPEATED_FAILURE_NOTE_AT:
                    note = tables.MESSAGES["repeated_failure"].format(name=o.call.name, times=times)
            elif not o.error:
                self.streak = 0
        if self.streak >= tables.ERROR_STREAK_INJECT_AT:
            count, self.streak = self.streak, 0
            return Regulation("inject", tables.MESSAGES["error_streak"].format(count=count))
        if note:
            return Regulation("annotate", note)
        return CONTINUE


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except json.JSONDecodeError:
        return arguments
