#!/usr/bin/env python3
"""Time the reference doing what `ecdysis_host::env::bench` does.

For every airline and retail task: build the gold trajectory (run the gold
actions on a fresh environment, recording their outputs, then one assistant
message per communicate_info string), hash the final DB, and evaluate the
trajectory with τ²'s evaluator (EvaluationType.ALL). Writes the timings to
tests/conformance/vectors/reference_bench.json, which the Rust bench reads to
print its speed-up.

Run it with the generator's venv:
    <venv>/bin/python tests/conformance/bench_reference.py
"""

import json
import os
import platform
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    import warnings

    warnings.simplefilter("ignore")
    from loguru import logger

    logger.remove()
    from tau2.data_model.message import AssistantMessage, ToolCall
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    t0 = time.perf_counter()
    domains = [("airline", airline, airline.get_tasks(None)), ("retail", retail, retail.get_tasks(None))]
    for _, mod, _ in domains:
        mod.get_environment()
    load = time.perf_counter() - t0

    t1 = time.perf_counter()
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
    replay = time.perf_counter() - t1
    out = {"load_seconds": round(load, 3), "replay_seconds": round(replay, 3), "tasks": tasks, "solved": solved,
           "python": platform.python_version(), "machine": platform.machine()}
    with open(os.path.join(HERE, "vectors", "reference_bench.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
