#!/usr/bin/env bash
# Build what the Python and JavaScript runtime suites need with the host
# binary, then run both suites. Part of the README's test command.
#
#   target/runtimes-fixtures/
#     template/            export of harness-template (harness.wasm + harness.json)
#     template-two-layers/ the same export with only contract and skills on
#     template.vectors.jsonl   its hook calls on retail test tasks (sim:mixed)
#     template-py/         export of harness-template-py (built with componentize-py)
#     template-py.vectors.jsonl  its hook calls on the same retail tasks
#     evolved-py/          export of a 1-round Python training's accepted candidate
#     evolved-py.vectors.jsonl   its hook calls on four of that run's training tasks
#     evolved/             export of the incumbent of a 1-round offline `train`
#     evolved.vectors.jsonl    its hook calls on the run's training tasks
#     hostile/<feature>.wasm   guests/hostile, one build per attack (+ good.wasm)
#     hostile.<feature>.vectors.jsonl  huge-args/calc-bomb's hook calls on the template's run
#
# Environment: as runtimes/prepare.sh (PYTHON, RUNTIMES_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section says when it starts (seconds since this script began), so
# a slow CI run shows which section took the time.
SECONDS=0
section() { echo "== $* (at ${SECONDS} s)"; }
ROOT=$PWD
FIX=$ROOT/target/runtimes-fixtures
STORE=$FIX/store
VENV=${RUNTIMES_VENV:-$ROOT/target/runtimes-venv}

section "runtimes: host binary"
# With the feature set the README's `cargo test --workspace` built the
# binary with (the binary crate's dev-dependency turns on the runner's
# `testing`), so after it this build is a no-op instead of a rebuild of every
# crate above the runner. The fault hooks it compiles in stay inert: they
# also need TEST_FAULT_ENV, which nothing here sets.
cargo build -q -p ecdysis-host --features ecdysis-runner/testing
HOST="$ROOT/target/debug/ecdysis-host"
# The harness builds below share the tests' warm cargo target, and the
# host's compiled native code their directory (.ci/run names the same ones).
export ECDYSIS_CARGO_TARGET_DIR="${ECDYSIS_CARGO_TARGET_DIR:-$ROOT/target/evolve-candidates}"
export ECDYSIS_NATIVE_CACHE="${ECDYSIS_NATIVE_CACHE:-$ROOT/target/native-cache}"
host() { "$HOST" --quiet --store "$STORE" "$@"; }

rm -f "$FIX/ready"
mkdir -p "$FIX/hostile"

section "harness-template-py: the Python starting harness's own unit tests"
PYTOOLS=$ROOT/.ecdysis/python-tools
if [ -x "$PYTOOLS/bin/pytest" ]; then
    "$PYTOOLS/bin/pytest" -q "$ROOT/harness-template-py"
elif [ -n "${CI:-}" ]; then
    echo "CI is set but $PYTOOLS has no pytest (bash scripts/python-tools.sh)"; exit 1
else
    echo "skipped: no $PYTOOLS/bin/pytest (bash scripts/python-tools.sh installs it)"
fi

section "runtimes: hostile guests"
for feature in good infinite-loop memory-bomb deep-recursion panic huge-output unknown-tool \
    bad-json-args huge-args calc-bomb mutating-env-view env-view-flood wants-clock \
    inflate-prompt inflate-guidance inflate-block inflate-inject inflate-annotate; do
    if [ "$feature" = good ]; then hash=$(host build guests/hostile); else
        hash=$(host build guests/hostile --features "$feature"); fi
    cp "$STORE/components/$hash.wasm" "$FIX/hostile/$feature.wasm"
done

section "runtimes: the template, its run and its vectors"
template=$(host build harness-template)
host run --harness "$template" --tasks 5,9,12,17 --agent-model sim:mixed --concurrency 4 --force-new \
    --out "$FIX/template-run" >/dev/null
host export "$template" --out "$FIX/template" >/dev/null
# The same harness with realize and regulate switched off (harness.json
# `layers`), which every runtime must honour.
host export "$template" --layers contract,skills --out "$FIX/template-two-layers" >/dev/null
host vectors --run "$FIX/template-run" --out "$FIX/template.vectors.jsonl" >/dev/null

section "runtimes: the Python starting harness (componentize-py), its run and its vectors"
if [ -x "$ROOT/.ecdysis/python-tools/bin/componentize-py" ]; then
    export ECDYSIS_COMPONENTIZE_PY="$ROOT/.ecdysis/python-tools/bin/componentize-py"
fi
template_py=$(host build harness-template-py)
# A hook deadline no machine load reaches: the vectors' re-run keeps the
# run's limits, and an episode cut short by a deadline diverges from its
# record. The deadline changes no decision of a hook that ends in time.
PY_DEADLINE=(--deadline-ms 20000)
host run --harness "$template_py" --tasks 5,9,12,17 --agent-model sim:mixed --concurrency 4 --force-new \
    "${PY_DEADLINE[@]}" --out "$FIX/template-py-run" >/dev/null
host export "$template_py" --out "$FIX/template-py" >/dev/null
host vectors --run "$FIX/template-py-run" --out "$FIX/template-py.vectors.jsonl" >/dev/null
# One round of training from it with a scripted external coder (it adds
# retail aliases): the accepted candidate, built with componentize-py in the
# jail, is what the runtimes load next. On five tasks, not the whole split:
# 0-3 are the vectors' tasks below, and 96 is the one the aliases turn from
# failed to solved with sim:mixed, so the round is accepted.
if [ ! -f "$FIX/train-py/summary.json" ]; then
    rm -rf "$FIX/train-py"
    host train --source harness-template-py --domain tau2/retail --agent-model sim:mixed \
        --method ecdysis-nofdcr --rounds 1 --test-split none --tasks 0,1,2,3,96 "${PY_DEADLINE[@]}" \
        --coder-command "/usr/bin/python3 $ROOT/runtimes/fixtures/py-coder.py" \
        --coder-ro "$ROOT/runtimes/fixtures" --out "$FIX/train-py" >/dev/null
fi
incumbent_py=$(cat "$FIX/train-py/incumbent")
if [ "$incumbent_py" = "$(cat "$FIX/train-py/initial")" ]; then
    echo "the Python training round accepted no candidate" >&2
    exit 1
fi
host export --train-run "$FIX/train-py" --out "$FIX/evolved-py" >/dev/null
host vectors --run "$FIX/train-py/evals/${incumbent_py:0:16}-train" --tasks 0,1,2,3 \
    --out "$FIX/evolved-py.vectors.jsonl" >/dev/null

section "runtimes: an evolved candidate (1 offline round of train), its vectors"
if [ ! -f "$FIX/train/summary.json" ]; then
    rm -rf "$FIX/train"
    host train --rounds 1 --start-blank --tasks 0,1,2,3,4,6,7,8 --agent-model sim:clumsy \
        --test-split none --cargo-target-dir "$ROOT/target/evolve-candidates" --out "$FIX/train" >/dev/null
fi
incumbent=$(cat "$FIX/train/incumbent")
if [ "$incumbent" = "$(cat "$FIX/train/initial")" ]; then
    echo "the training round accepted no candidate: no evolved harness to test" >&2
    exit 1
fi
host export --train-run "$FIX/train" --out "$FIX/evolved" >/dev/null
host vectors --run "$FIX/train/evals/${incumbent:0:16}-train" --out "$FIX/evolved.vectors.jsonl" >/dev/null
# Hostile guests' vectors over the template's run: the host's caps on a
# harness-written call (huge-args: arguments_too_large) and on env-view
# arguments (calc-bomb: invalid-arguments, logged as a marker) and the
# episode's budget on added text (inflate-*: added_text_over_budget at the
# hook that crosses it) replay byte for byte.
for feature in huge-args calc-bomb inflate-prompt inflate-inject; do
    host vectors --harness "$FIX/hostile/$feature.wasm" --run "$FIX/template-run" --tasks 5,9 \
        --out "$FIX/hostile.$feature.vectors.jsonl" >/dev/null
done
touch "$FIX/ready"

bash runtimes/prepare.sh
section "runtimes: python (pytest)"
ECDYSIS_FIXTURES="$FIX" "$VENV/bin/python" -m pytest -q runtimes/python/tests

if [ -d runtimes/js ]; then
    section "runtimes: javascript (jco transpile, node --test)"
    (cd runtimes/js && ECDYSIS_FIXTURES="$FIX" npm test)
fi
section "runtimes: done"
