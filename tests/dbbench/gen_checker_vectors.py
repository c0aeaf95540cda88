#!/usr/bin/env python3
"""Records the original DBBench checker's verdicts as test vectors.

Runs AgentBench's own `result_processor.py` (NOT part of this repository: pass the
path of a checkout's `src/server/tasks/dbbench/result_processor.py`) on every label
of `data/dbbench/*.jsonl` plus hand-made variants, and writes one JSON object per
line to `checker_vectors.jsonl`:

    {"answer": <json>, "ground_truth": <json>, "type": "...", "result": bool,
     "clean": [...] | null}

`answer` is what an agent passes to commit_final_answer (any JSON value; the original
takes `list(arguments.values())[0]`), `ground_truth` the label list (or `answer_md5`
string), `result` the original's `compare_results`, `clean` its `_clean_answer` of
the answer. The Rust port (host/dbbench/src/checker.rs) must agree on all.

    python3 tests/dbbench/gen_checker_vectors.py /path/to/result_processor.py
"""
import contextlib
import importlib.util
import io
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_processor(path):
    # result_processor.py imports `.interaction.Database` (only for a type it
    # never uses in the comparison): give it a stub package.
    pkg = types.ModuleType("dbbench_orig")
    pkg.__path__ = []
    inter = types.ModuleType("dbbench_orig.interaction")
    inter.Database = object
    sys.modules["dbbench_orig"] = pkg
    sys.modules["dbbench_orig.interaction"] = inter
    spec = importlib.util.spec_from_file_location("dbbench_orig.result_processor", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.DBResultProcessor


def tasks():
    for name in ("standard.jsonl", "dev.jsonl"):
        for line in (ROOT / "data/dbbench" / name).read_text().splitlines():
            yield json.loads(line)


# (answer, ground_truth, type): the interesting corners of the rules.
HAND = [
    (["1"], ["1.0"], "counting"), (["1.0"], ["1"], "counting"), ("1", ["1.0"], "counting"),
    (1, ["1.0"], "counting"), (1.0, ["1"], "counting"), ([1], ["1"], "counting"),
    (["12%"], ["12"], "other"), (["12 %"], ["12"], "other"), (["12%"], ["0.12"], "other"),
    (["1,234"], ["1234"], "other"), (["1,234"], ["1234.0"], "other"), (["1,234.5"], ["1234.5"], "other"),
    (["1,234%"], ["1234"], "other"), (["none%"], ["0"], "other"), (["a,b"], ["ab"], "other"),
    (None, ["0"], "other"), (None, ["None"], "other"), ([None], ["0"], "other"),
    (["None"], ["null"], "other"), (["NULL"], ["0"], "other"), (["undefined"], ["nan"], "other"),
    (["inf"], ["0"], "other"), (["-Infinity"], ["0"], "other"), (["+inf"], ["+inf"], "other"),
    ([""], ["0"], "other"), ([], [], "other"), ([], ["0"], "other"), ("", ["0"], "other"),
    (["0"], ["0.0"], "other"), (["0.0"], ["0"], "other"), (["0"], ["0"], "other"),
    (["3.14159"], ["3.14"], "aggregation-AVG"), (["3.15"], ["3.14"], "aggregation-AVG"),
    (["3.151"], ["3.14"], "aggregation-AVG"), (["3.1500001"], ["3.14"], "aggregation-AVG"),
    (["1e3"], ["1000"], "other"), (["1_000"], ["1000"], "other"), ([" 7 "], ["7"], "other"),
    (["'7'"], ["7"], "other"), (['"x"'], ["x"], "other"), (["x"], ["X"], "other"),
    (["a", "b"], ["b", "a"], "other"), (["a", "a", "b"], ["a", "b"], "other"),
    (["a", "b"], ["a", "b", "b"], "other"), (["1", "2"], ["2", "1"], "other"),
    (["1", "1", "2"], ["1", "2", "2"], "other"), (["1", "2"], ["1.001", "2.009"], "other"),
    (["1", "2"], ["1.02", "2"], "other"), (["1", "2", "3"], ["1", "2"], "other"),
    (["1", "x"], ["x", "1"], "other"), (["1", "1.0"], ["1"], "other"),
    ("[('a',), ('b',)]", ["a", "b"], "other"), ("[('a',)]", ["a"], "other"),
    ("[(293.0,)]", ["293"], "other"), ("[(1, 2)]", ["1"], "other"), ("[]", [], "other"),
    ("['a', 'b']", ["a", "b"], "other"), ("[1, 2]", ["1", "2"], "other"),
    ("[a, b]", ["a", "b"], "other"), ("[Decimal('1.5')]", ["1.5"], "other"),
    ("[(Decimal('1.5'),)]", ["1.5"], "other"), ("['it''s']", ["its"], "other"),
    ("[\"a, b\", 'c']", ["a, b", "c"], "other"), ("[None]", ["0"], "other"),
    ("[True, False]", ["True", "False"], "other"), ("[[1, 2]]", ["[1, 2]"], "other"),
    ("[(1,), [2]]", ["1", "2"], "other"), ("[0x10]", ["16"], "other"), ("[1e400]", ["0"], "other"),
    ("[-1.5]", ["-1.5"], "other"), ("['a\\'b']", ["a'b"], "other"), ("[r'a\\n']", ["a\\n"], "other"),
    ("[b'x']", ["b'x"], "other"), ("['a' 'b']", ["ab"], "other"), ("[{'k': 1}]", ["{'k': 1}"], "other"),
    ("[1,]", ["1"], "other"), ("[(1,),]", ["1"], "other"), ("[()]", [], "other"),
    ("  [1]  ", ["1"], "other"), ("a, b", ["a, b"], "other"), ("1,234", ["1234"], "other"),
    ("12%", ["12"], "other"), ("'quoted'", ["quoted"], "other"),
    ([1.5, 2], ["1.5", "2"], "other"), ([True], ["True"], "other"), ([[1, "a"]], ["[1, 'a']"], "other"),
    ([{"a": 1}], ["{'a': 1}"], "other"), ({"a": 1}, ["{'a': 1}"], "other"), (True, ["True"], "other"),
    ([1e16], ["1e+16"], "other"), ([0.1], ["0.1"], "other"), ([1e-5], ["1e-05"], "other"),
    (["x"], "[('x',)]", "other"), (["x"], "x", "other"),
    ("abc12", "[('abc12',)]", "INSERT"), ("abc12", "[('abd12',)]", "UPDATE"),
    ("None", "[(None,)]", "INSERT"), ("", "[('',)]", "INSERT"),
    (["Ole M\u00f8rk"], ["Ole Mork"], "other"), (["caf\u00e9"], ["CAF\u00c9"], "other"),
    (["\u00a012"], ["12"], "other"), (["\u0661\u0662"], ["12"], "other"),
]


def variants(label):
    """Agent-like answers for a SELECT label."""
    out = [label, [str(x).upper() for x in label], list(reversed(label)), label + label[:1],
           ", ".join(str(x) for x in label), str([(x,) for x in label])]
    if len(label) == 1:
        v = str(label[0])
        out += [v, [v + "0"], [v.rstrip("0").rstrip(".") if "." in v else v + ".0"]]
        try:
            f = float(v.replace(",", ""))
            out += [[str(f + 0.005)], [str(f + 0.02)], [f], [f"{f:,}"], [f"{v}%"]]
        except ValueError:
            pass
    return out


def main():
    proc = load_processor(sys.argv[1])
    cases = []
    for t in tasks():
        kind = t["type"][0]
        if kind in ("INSERT", "UPDATE"):
            h = t["answer_md5"].split("'")[1]
            cases += [(h, t["answer_md5"], kind), (h[:-1] + "0", t["answer_md5"], kind)]
        else:
            cases += [(v, t["label"], kind) for v in variants(t["label"])]
    cases += HAND
    out = ROOT / "tests/dbbench/checker_vectors.jsonl"
    seen = set()
    with out.open("w") as f:
        for answer, gt, kind in cases:
            key = json.dumps([answer, gt, kind])
            if key in seen:
                continue
            seen.add(key)
            with contextlib.redirect_stdout(io.StringIO()):
                result = proc.compare_results(answer, gt, kind)
                try:
                    clean = proc._clean_answer(answer)
                except Exception as e:  # noqa: BLE001 - recorded as such
                    clean = f"raised {type(e).__name__}"
            f.write(json.dumps({"answer": answer, "ground_truth": gt, "type": kind,
                                "result": result, "clean": clean}, ensure_ascii=False) + "\n")
    print(f"{len(seen)} vectors -> {out}")


if __name__ == "__main__":
    main()
