#!/usr/bin/env python3
"""Agreement between hand labels and the mechanism key of `ecdysis-host failures`.

Issue #51: the key was designed on DBBench data, so it is judged on runs it was
not built from, whose failing episodes were labelled by hand (and committed)
before `failures` was run on them.

Usage:
    python3 scripts/mechanism-agreement.py [--suffix S] [DATA_DIR] [RUN ...]

DATA_DIR (default docs/src/results/data/mechanism-agreement) holds, per RUN,
`RUN-hand-labels.tsv` (task, trial, mechanism, layer, fault, note; lines
starting with `#` are comments) and `RUN-failures.json` (the output of
`ecdysis-host failures --json runs/RUN`). Without RUN arguments every
`*-hand-labels.tsv` is read. With `--suffix S` the key's output is read from
`RUN-failures{S}.json` instead (another version of the key on the same runs,
kept beside the earlier output: `--suffix -0d76ede`).

Per episode it compares the mechanism (the exact finish relation: same_reply,
after_error, after_results, without_calls, never, no_calls) and the label
(layer alone; layer and fault). The key's label is its group's label, as
`failures` shows it. A hand layer of `environment` means no harness layer can
fix the failure (the task fails for sim:oracle too); the closed set of the key
has no such label, so those episodes are counted as disagreements and also
reported apart.

The runs use simulated agents — not a benchmark result: only the agreement of
the grouping key is measured here, not the agents' scores.
"""

import collections
import csv
import glob
import json
import os
import sys


def read_hand(path):
    with open(path, newline="") as f:
        rows = [line for line in f if not line.startswith("#")]
    out = {}
    for row in csv.DictReader(rows, delimiter="\t"):
        out[(row["task"], int(row["trial"]))] = row
    return out


def read_key(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for group in data["groups"]:
        # Each failure's own label where the key gives one (later
        # versions), else its group's.
        labels = group.get("labels") or [group["label"]] * len(group["records"])
        for record, label in zip(group["records"], labels):
            environment = label["layer"] is None
            out[(record["task_id"], int(record["trial"]))] = {
                "mechanism": group["signature"]["finish"],
                "layer": "environment" if environment else label["layer"],
                "fault": "-" if environment else label["fault"],
                "end": group["signature"]["end"],
                "key": group["key"],
            }
    return data, out


def rate(n, d):
    return f"{n}/{d} ({100.0 * n / d:.0f}%)" if d else "0/0 (-)"


def main(argv):
    suffix = ""
    if len(argv) > 2 and argv[1] == "--suffix":
        suffix = argv[2]
        argv = argv[:1] + argv[3:]
    data_dir = argv[1] if len(argv) > 1 else "docs/src/results/data/mechanism-agreement"
    runs = argv[2:] or sorted(
        os.path.basename(p)[: -len("-hand-labels.tsv")]
        for p in glob.glob(os.path.join(data_dir, "*-hand-labels.tsv"))
    )
    print("Mechanism-key agreement with hand labels (issue #51)")
    print("simulated agent — not a benchmark result (episode scores); the agreement is about the grouping key")
    print()
    totals = collections.Counter()
    confusion = collections.Counter()
    for run in runs:
        hand = read_hand(os.path.join(data_dir, f"{run}-hand-labels.tsv"))
        data, key = read_key(os.path.join(data_dir, f"{run}-failures{suffix}.json"))
        both = sorted(set(hand) & set(key))
        only_hand = sorted(set(hand) - set(key))
        only_key = sorted(set(key) - set(hand))
        c = collections.Counter()
        print(f"== {run}: {data['episodes']} episodes, {data['failures']} failing by the key "
              f"({len(data['groups'])} groups), {len(hand)} labelled by hand")
        if only_hand or only_key:
            print(f"   labelled only by hand: {only_hand}; only by the key: {only_key}")
        print(f"   {'task':<28}{'hand mechanism':<15}{'key mechanism':<15}"
              f"{'hand label':<22}{'key label':<20}")
        for ep in both:
            h, k = hand[ep], key[ep]
            env = h["layer"] == "environment"
            m = h["mechanism"] == k["mechanism"]
            ly = h["layer"] == k["layer"]
            lf = ly and h["fault"] == k["fault"]
            c["n"] += 1
            c["mech"] += m
            c["layer"] += ly
            c["layer_fault"] += lf
            if not env:
                c["n_agent"] += 1
                c["layer_agent"] += ly
                c["layer_fault_agent"] += lf
            hl = h["layer"] if env else f"{h['layer']}:{h['fault']}"
            kl = f"{k['layer']}:{k['fault']}"
            if not m:
                confusion[("mechanism", h["mechanism"], k["mechanism"])] += 1
            if not lf:
                confusion[("label", hl, kl)] += 1
            flag = ("" if m else " M") + ("" if lf else " L")
            print(f"   {ep[0]:<28}{h['mechanism']:<15}{k['mechanism']:<15}{hl:<22}{kl:<20}{flag}")
        print(f"   mechanism (exact finish relation): {rate(c['mech'], c['n'])}")
        print(f"   label, layer:                      {rate(c['layer'], c['n'])}"
              f"   (without environment failures: {rate(c['layer_agent'], c['n_agent'])})")
        print(f"   label, layer+fault:                {rate(c['layer_fault'], c['n'])}"
              f"   (without environment failures: {rate(c['layer_fault_agent'], c['n_agent'])})")
        print()
        totals.update(c)
    print("== all runs")
    print(f"   episodes compared:                 {totals['n']} ({totals['n_agent']} not environment failures)")
    print(f"   mechanism (exact finish relation): {rate(totals['mech'], totals['n'])}")
    print(f"   label, layer:                      {rate(totals['layer'], totals['n'])}"
          f"   (without environment failures: {rate(totals['layer_agent'], totals['n_agent'])})")
    print(f"   label, layer+fault:                {rate(totals['layer_fault'], totals['n'])}"
          f"   (without environment failures: {rate(totals['layer_fault_agent'], totals['n_agent'])})")
    print()
    print("confusion pairs (hand -> key: episodes)")
    if not confusion:
        print("   none")
    for (what, h, k), n in sorted(confusion.items(), key=lambda x: (x[0][0], -x[1], x[0])):
        print(f"   {what:<10}{h} -> {k}: {n}")


if __name__ == "__main__":
    main(sys.argv)
