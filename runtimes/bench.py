#!/usr/bin/env python3
"""Per-hook time of the same harness on the same inputs in the three
runtimes, in one run: the Rust host (`ecdysis-host run`, the time of each
hook's guest call as the host records it in trajectories.jsonl), Python
(wasmtime-py) and JavaScript (jco in a worker thread) replaying the vectors
of those very episodes (the whole API call: conversion, the guest, the
answer checks; for JS also the worker round trip).

    bash runtimes/test.sh        # builds the fixtures once
    target/runtimes-venv/bin/python runtimes/bench.py [--rounds 3]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "target" / "runtimes-fixtures"
HOOKS = ["constructor", "contract", "skills", "realize", "regulate"]


def rust(host: Path, harness_hash: str, rounds: int) -> dict:
    times: dict = {}
    run_config = json.loads((FIX / "template-run" / "config.json").read_text())
    tasks = ",".join(run_config["tasks"])
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as out:
            subprocess.run(
                [str(host), "--quiet", "--store", str(FIX / "store"), "run", "--harness", harness_hash,
                 "--tasks", tasks, "--agent-model", run_config["agent_model"], "--concurrency", "1", "--out", out],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for line in (Path(out) / "trajectories.jsonl").read_text().splitlines():
                for h in json.loads(line)["hooks"]:
                    if h["hook"] != "constructor":  # its time is not recorded
                        times.setdefault(h["hook"], []).append(h["micros"] / 1e6)
    return times


def python(rounds: int) -> dict:
    from ecdysis_harness import Harness
    from ecdysis_harness.vectors import replay

    harness = Harness.load(FIX / "template")
    times: dict = {}
    for _ in range(rounds):
        replay(harness, FIX / "template.vectors.jsonl", times)
    return times


def javascript(rounds: int) -> dict:
    out = subprocess.run(
        ["node", "scripts/bench.mjs", str(FIX / "js" / "template"), str(FIX / "template.vectors.jsonl"), str(rounds)],
        cwd=REPO / "runtimes" / "js", check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)


def median_us(times: dict, hook: str):
    xs = times.get(hook)
    return statistics.median(xs) * 1e6 if xs else None


def cell(times: dict, hook: str, base: dict) -> str:
    """Median µs, and its ratio to the Rust host's for the same hook."""
    us, ref = median_us(times, hook), median_us(base, hook)
    if us is None:
        return "—"
    if ref and times is not base:
        return f"{us:,.0f} ({us / ref:.1f}x)"
    return f"{us:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--host", default=str(REPO / "target" / "release" / "ecdysis-host"),
                    help="the host binary (default: the release build; a debug build is much slower)")
    args = ap.parse_args()
    if not (FIX / "ready").exists():
        sys.exit(f"no fixtures in {FIX}: run `bash runtimes/test.sh` first")
    harness_hash = json.loads((FIX / "template" / "harness.json").read_text())["hash"]
    host = Path(args.host)
    if not host.exists():
        sys.exit(f"{host} does not exist: `cargo build --release -p ecdysis-host` or pass --host")
    columns = [("Rust host", rust(host, harness_hash, args.rounds)), ("Python", python(args.rounds)), ("JavaScript", javascript(args.rounds))]
    print(f"per-hook time, median µs, template {harness_hash[:12]}, {args.rounds} rounds of the same episodes")
    base = columns[0][1]
    print(f"| {'hook':<11} | " + " | ".join(f"{name:>16}" for name, _ in columns) + " | calls |")
    print("|" + "---|" * (len(columns) + 2))
    for hook in HOOKS:
        calls = max(len(t.get(hook, [])) for _, t in columns) // args.rounds
        print(f"| {hook:<11} | " + " | ".join(f"{cell(t, hook, base):>16}" for _, t in columns) + f" | {calls:>5} |")
    print("Rust: the guest call inside the host (HookRecord.micros; the constructor's is not recorded); "
          "Python/JS: the whole API call (conversion, guest, checks; JS: plus the worker round trip).")


if __name__ == "__main__":
    main()
