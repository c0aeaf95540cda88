"""Replay the Rust host's conformance vectors (`ecdysis-host vectors`,
format `ecdysis-hook-vectors/1`) and demand byte-identical answers.

Every hook line is replayed on a fresh episode per constructor line; the
env view answers from the line's recorded `view_calls`; the replayed line is
built from this runtime's own output and must equal the recorded line byte
for byte.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from .checks import parse_json
from .errors import ContractViolation, HarnessError, HookError, VectorMismatch
from .runtime import Episode, Harness
from .types import ViewOutput, canonical_dumps

VECTORS_FORMAT = "ecdysis-hook-vectors/1"


@dataclass
class ReplayReport:
    header: dict
    records: int
    episodes: int


class _RecordedView:
    """Answers env-view calls from the recorded calls of the current hook:
    the first unused recorded call with the same tool and equal arguments."""

    def __init__(self) -> None:
        self.calls: List[dict] = []
        self.used: List[bool] = []

    def load(self, calls: List[dict]) -> None:
        self.calls = calls
        self.used = [False] * len(calls)

    def __call__(self, name: str, arguments: Dict[str, Any]) -> ViewOutput:
        for i, call in enumerate(self.calls):
            if self.used[i] or call["name"] != name:
                continue
            try:
                same = parse_json(call["arguments"]) == arguments
            except ValueError:
                same = False
            answer = call["answer"]
            if same and (answer["tag"] == "ok" or answer["val"]["tag"] == "tool-error"):
                self.used[i] = True
                if answer["tag"] == "ok":
                    return ViewOutput(answer["val"], False)
                return ViewOutput(answer["val"]["val"], True)
        return ViewOutput(f"replay: `{name}` with these arguments is not in the recording", True)


def _error_output(e: HarnessError) -> dict:
    val: Dict[str, Any] = {"kind": e.kind}
    if isinstance(e, ContractViolation):
        val["violation"] = e.violation
    return {"tag": "err", "val": val}


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def replay_line(
    ep: Optional[Episode],
    record: dict,
    harness: Harness,
    view: _RecordedView,
    timings: Optional[Dict[str, List[float]]] = None,
):
    """Replay one hook line; returns (episode, replayed line text).
    `timings` collects the seconds of each hook call (the whole API call:
    conversion, the guest, the checks) by hook name."""
    hook = record["hook"]
    started = time.perf_counter()
    view.load(record["view_calls"])
    if hook == "constructor":
        ep = Episode(harness, view, None, harness.policy)
        try:
            ep._start_canonical(record["input"])
            output = {"tag": "ok", "val": None}
        except HookError as e:
            output = _error_output(e)
    else:
        if ep is None:
            raise VectorMismatch(f"line for episode {record['episode']} comes before its constructor")
        try:
            output = {"tag": "ok", "val": ep.invoke(hook, record["input"])}
        except HookError as e:
            output = _error_output(e)
    if timings is not None:
        timings.setdefault(hook, []).append(time.perf_counter() - started)
    line = {
        "episode": record["episode"],
        "task": record["task"],
        "trial": record["trial"],
        "seq": record["seq"],
        "hook": hook,
        "input": record["input"],
        "view_calls": ep.view_log if ep is not None else [],
        "output": output,
    }
    return ep, canonical_dumps(line)


def replay(
    harness: Harness, path: Union[str, Path], timings: Optional[Dict[str, List[float]]] = None
) -> ReplayReport:
    """Replay a vector file; raises `VectorMismatch` at the first record
    whose replayed line differs, showing both lines."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines:
        raise VectorMismatch(f"{path} is empty")
    header = json.loads(lines[0])
    if header.get("format") != VECTORS_FORMAT:
        raise VectorMismatch(f"{path}: format {header.get('format')!r}, expected {VECTORS_FORMAT}")
    if header.get("harness") != harness.hash:
        raise VectorMismatch(
            f"{path} was recorded for harness {header.get('harness')}, not {harness.hash}"
        )
    view = _RecordedView()
    ep: Optional[Episode] = None
    episodes = 0
    for number, recorded in enumerate(lines[1:], start=2):
        record = json.loads(recorded)
        if record["hook"] == "constructor":
            if ep is not None:
                ep.close()
            episodes += 1
        ep, replayed = replay_line(ep, record, harness, view, timings)
        if replayed != recorded:
            at = _first_difference(recorded, replayed)
            raise VectorMismatch(
                f"{path}:{number}: episode {record['episode']} (task {record['task']} trial {record['trial']}) "
                f"hook #{record['seq']} `{record['hook']}` differs at byte {at}:\n"
                f"  recorded: {recorded}\n  replayed: {replayed}"
            )
    if ep is not None:
        ep.close()
    return ReplayReport(header=header, records=len(lines) - 1, episodes=episodes)
