"""Plain Python mirrors of the `ecdysis:harness@0.1.0` WIT types.

Records are frozen dataclasses whose fields are the WIT fields in snake_case.
Variants are one dataclass per case (`Proceed`, `Execute`, `Block`, ...),
each with a `TAG` naming the WIT case; `ActionDecision` and friends are the
unions of their cases. `StepKind` is a `str` enum of the WIT names.

`to_canonical` / `from_canonical` convert to and from the canonical JSON form
of the Rust host's conformance vectors (records: objects with the kebab-case
WIT field names in WIT order; variants: `{"tag": case, "val": payload}`;
enums: strings; options: `null` or the value), and `canonical_dumps` writes
it byte for byte as the Rust host does.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, List, Optional, Union


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the environment declares it."""

    name: str
    description: str
    #: JSON Schema of the arguments object, as JSON text.
    parameters: str
    #: True when calling the tool can change the environment's state.
    mutates: bool


@dataclass(frozen=True)
class ContractInput:
    domain: str
    system_prompt: str
    tools: List[ToolSpec] = field(default_factory=list)


@dataclass(frozen=True)
class ToolDescription:
    name: str
    description: str


@dataclass(frozen=True)
class ContractOutput:
    system_prompt: str
    tool_descriptions: List[ToolDescription] = field(default_factory=list)


@dataclass(frozen=True)
class TaskView:
    domain: str
    first_user_message: str


@dataclass(frozen=True)
class Guidance:
    title: str
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    #: Arguments as the text of a JSON object.
    arguments: str


# --- agent-action --------------------------------------------------------------


@dataclass(frozen=True)
class CallAction:
    """A structured tool call, about to run."""

    TAG: ClassVar[str] = "call"
    call: ToolCall


@dataclass(frozen=True)
class TextAction:
    """An assistant message without structured calls."""

    TAG: ClassVar[str] = "text"
    text: str


AgentAction = Union[CallAction, TextAction]

# --- action-decision -----------------------------------------------------------


@dataclass(frozen=True)
class Proceed:
    TAG: ClassVar[str] = "proceed"


@dataclass(frozen=True)
class Execute:
    TAG: ClassVar[str] = "execute"
    call: ToolCall


@dataclass(frozen=True)
class Block:
    TAG: ClassVar[str] = "block"
    text: str


@dataclass(frozen=True)
class Realize:
    TAG: ClassVar[str] = "realize"
    calls: List[ToolCall]


ActionDecision = Union[Proceed, Execute, Block, Realize]


class StepKind(str, enum.Enum):
    AGENT_MESSAGE = "agent-message"
    TOOL_RESULTS = "tool-results"
    USER_MESSAGE = "user-message"


@dataclass(frozen=True)
class ToolOutcome:
    call: ToolCall
    content: str
    error: bool
    blocked: bool


@dataclass(frozen=True)
class StepReport:
    step: int
    steps_left: int
    errors_left: int
    kind: StepKind
    text: Optional[str] = None
    outcomes: List[ToolOutcome] = field(default_factory=list)


# --- regulation ----------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    TAG: ClassVar[str] = "continue"


@dataclass(frozen=True)
class Annotate:
    TAG: ClassVar[str] = "annotate"
    text: str


@dataclass(frozen=True)
class Inject:
    TAG: ClassVar[str] = "inject"
    text: str


@dataclass(frozen=True)
class ForceCall:
    TAG: ClassVar[str] = "force-call"
    call: ToolCall


@dataclass(frozen=True)
class Stop:
    TAG: ClassVar[str] = "stop"
    reason: str


Regulation = Union[Continue, Annotate, Inject, ForceCall, Stop]


@dataclass(frozen=True)
class EpisodeInfo:
    domain: str
    max_steps: int
    max_errors: int


@dataclass(frozen=True)
class ViewOutput:
    """What an env-view callable returns: the text the model would see, and
    whether the tool reported an error."""

    content: str
    error: bool = False


# --- canonical JSON ------------------------------------------------------------

_VARIANTS = {
    "AgentAction": (CallAction, TextAction),
    "ActionDecision": (Proceed, Execute, Block, Realize),
    "Regulation": (Continue, Annotate, Inject, ForceCall, Stop),
}


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _is_variant_case(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) and "TAG" in cls.__dict__


def to_canonical(value: Any) -> Any:
    """The canonical JSON value (dicts, lists, str, int, bool, None)."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        if _is_variant_case(type(value)):
            out: dict = {"tag": type(value).TAG}
            if fields:
                out["val"] = to_canonical(getattr(value, fields[0].name))
            return out
        return {_kebab(f.name): to_canonical(getattr(value, f.name)) for f in fields}
    if isinstance(value, (list, tuple)):
        return [to_canonical(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    raise TypeError(f"not a WIT value: {value!r}")


def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls, globalns=globals())


def from_canonical(tp: Any, data: Any) -> Any:
    """Build a value of type `tp` (a dataclass, a union of cases, a list,
    an optional, an enum or a primitive) from its canonical JSON."""
    origin = typing.get_origin(tp)
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):  # Optional[X]
            return None if data is None else from_canonical(args[0], data)
        if not isinstance(data, dict) or "tag" not in data:
            raise ValueError(f"expected a variant {{tag, val}}, got {data!r}")
        for case in args:
            if case.TAG == data["tag"]:
                return from_canonical(case, data)
        raise ValueError(f"unknown case {data['tag']!r}")
    if origin in (list, List):
        (item,) = typing.get_args(tp)
        return [from_canonical(item, d) for d in data]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = dataclasses.fields(tp)
        if _is_variant_case(tp):
            if data.get("tag") != tp.TAG:
                raise ValueError(f"expected case {tp.TAG!r}, got {data!r}")
            if not fields:
                return tp()
            f = fields[0]
            return tp(**{f.name: from_canonical(hints[f.name], data["val"])})
        return tp(**{f.name: from_canonical(hints[f.name], data[_kebab(f.name)]) for f in fields})
    if tp in (str, int, bool):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise ValueError(f"expected {tp.__name__}, got {data!r}")
        return data
    raise TypeError(f"unsupported type {tp!r}")


def canonical_dumps(value: Any) -> str:
    """Canonical JSON text of a canonical JSON value: compact, keys in the
    order given, UTF-8 left unescaped (as Rust's serde_json writes it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def neutral_answer(hook: str, argument: Any) -> Any:
    """The neutral answer of a hook (what fail-open proceeds with)."""
    if hook == "contract":
        return ContractOutput(system_prompt=argument.system_prompt, tool_descriptions=[])
    if hook == "skills":
        return []
    if hook == "realize":
        return Proceed()
    if hook == "regulate":
        return Continue()
    return None
