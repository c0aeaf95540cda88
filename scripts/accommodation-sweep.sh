#!/usr/bin/env bash
# The accommodation sweep of docs/src/results/validity.md (simulated agents:
# not a benchmark result): `experiment` on τ² retail and airline, training
# agents sim:clumsy, sim:mixed and sim:careless, each with the other three
# of sim:clumsy,sim:mixed,sim:careless,sim:texter as transfer models, seeds
# 0-2; then one table of the measured label against the testbed's ground
# truth over every accepted candidate.
#
# Resumable (each experiment directory resumes). Environment:
#   ECDYSIS_HOST  a built ecdysis-host (default: target/release/ecdysis-host)
#   OUT           sweep directory (default runs/accommodation-sweep)
#   SEEDS         seeds (default "0 1 2")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
HOST="${ECDYSIS_HOST:-target/release/ecdysis-host}"
OUT="${OUT:-runs/accommodation-sweep}"
SEEDS="${SEEDS:-0 1 2}"
ALL=(sim:clumsy sim:mixed sim:careless sim:texter)
[[ -x "$HOST" ]] || { echo "no ecdysis-host at $HOST (cargo build --release -p ecdysis-host)" >&2; exit 1; }
mkdir -p "$OUT"
for domain in tau2/retail tau2/airline; do
    for agent in sim:clumsy sim:mixed sim:careless; do
        others=$(printf '%s\n' "${ALL[@]}" | grep -vx "$agent" | paste -sd,)
        for seed in $SEEDS; do
            dir="$OUT/${domain#tau2/}-${agent#sim:}-$seed"
            echo "== $dir (transfer $others)" >&2
            "$HOST" --store "$OUT/store" experiment --domain "$domain" \
                --agent-model "$agent" --transfer "$others" --seed "$seed" \
                --rounds 3 --test-trials 1 --coder-latency-ms 0 \
                --out "$dir" > "$dir.out" 2>&1 \
                || { echo "failed: $dir (see $dir.out)" >&2; exit 1; }
        done
    done
done
python3 - "$OUT" <<'EOF'
import json, pathlib, sys
cells = {}
undetermined = 0
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/experiment.json")):
    for m in json.loads(f.read_text())["methods"]:
        for c in (m.get("measured_accommodation") or {}).get("changes", []):
            if c.get("accommodation") is None:
                undetermined += 1
                print(f"undetermined: {f.parent.name} {m['method']} round {c['round']} (no headroom: {', '.join(c.get('no_headroom', []))})")
                continue
            key = (c["accommodation"], c.get("ground_truth"))
            cells[key] = cells.get(key, 0) + 1
            print(f"{f.parent.name} {m['method']} round {c['round']}: train +{c['train_gain']:.3f}, others {c['other_gains']}, no headroom {c.get('no_headroom', [])}: measured {c['accommodation']}, truth {c.get('ground_truth')}")
print("simulated agents — not a benchmark result")
print("measured \\ truth   accommodation  interface-level")
for m in (True, False):
    print(f"{'accommodation' if m else 'interface-level':<18} {cells.get((m, True), 0):>13}  {cells.get((m, False), 0):>15}")
print(f"undetermined (no transfer agent had headroom): {undetermined}")
EOF
