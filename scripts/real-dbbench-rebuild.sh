#!/usr/bin/env bash
# Rebuild the first real DBBench experiment's evaluations from its recorded
# replies, with no model: every agent request is answered from the response
# cache of docs/src/results/data/real-dbbench/cache.tar.gz.
#
# The harnesses are rebuilt from source: the starting harness is
# harness-template at commit 78eca47 (unchanged from the run's start to its
# end), each candidate is its parent plus its recorded diff.patch. The runs
# use the experiment's agent settings (temperature 0, 384 tokens a reply,
# seed 0, one trial); the cache is unpacked into a directory of its own and
# read only, and the agent endpoint is a closed port, so a request the
# recording lacks fails instead of reaching a model.
#
# Writes, under $WORK/runs (one run directory each):
#   held-out (the 40 `test` tasks): direct-test, human-augmented-test,
#     ecdysis-nofdcr-c17170-test, self-evolution-a3dca0-test,
#     transfer-0.5b-initial-test (Qwen2.5-Coder-0.5B as the agent)
#   the 36-task pool: direct-pool, human-augmented-pool
#   the 12 training tasks: human-augmented-train12 and every candidate the
#     gates compared (ecdysis-e2b450, ecdysis-nofdcr-c17170 and -33edd2,
#     self-evolution-a3dca0 and -bf02f1)
# and prints each run's score, end reasons and cache hits.
# SAVE=1 then copies them into docs/src/results/data/real-dbbench/rebuilt
# (trajectories gzipped).
#
# Environment:
#   ECDYSIS_HOST  the binary (default target/release/ecdysis-host)
#   WORK          scratch directory (default: a new one under /tmp)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOST="${ECDYSIS_HOST:-$ROOT/target/release/ecdysis-host}"
# The runs start from $WORK: a relative path or a name on PATH made absolute.
HOST="$(realpath "$(command -v "$HOST" || echo "$HOST")")"
WORK="${WORK:-$(mktemp -d /tmp/real-dbbench-rebuild.XXXXXX)}"
DATA="$ROOT/docs/src/results/data/real-dbbench"
TEMPLATE_COMMIT=78eca47
DEAD_ENDPOINT=http://127.0.0.1:9/v1
TEST=standard-4,standard-13,standard-15,standard-20,standard-23,standard-35,standard-45,standard-55,standard-58,standard-60,standard-77,standard-91,standard-92,standard-99,standard-100,standard-102,standard-117,standard-128,standard-131,standard-142,standard-153,standard-155,standard-163,standard-167,standard-170,standard-181,standard-190,standard-233,standard-236,standard-238,standard-254,standard-259,standard-263,standard-268,standard-273,standard-276,standard-284,standard-290,standard-295,standard-296
POOL=standard-0,standard-10,standard-22,standard-24,standard-34,standard-48,standard-63,standard-64,standard-65,standard-78,standard-93,standard-96,standard-104,standard-108,standard-116,standard-121,standard-124,standard-127,standard-140,standard-161,standard-166,standard-195,standard-196,standard-197,standard-203,standard-205,standard-207,standard-211,standard-213,standard-231,standard-232,standard-234,standard-280,standard-285,standard-289,standard-299
# The 12 training tasks failure-aware selection kept (every method's
# selection.json).
TRAIN12=standard-0,standard-10,standard-22,standard-24,standard-34,standard-48,standard-64,standard-65,standard-96,standard-104,standard-161,standard-280

mkdir -p "$WORK"/{cache,src,runs,logs}
echo "rebuilding into $WORK with $HOST ($("$HOST" --version))"
tar -xzf "$DATA/cache.tar.gz" -C "$WORK/cache"

# Sources: NAME PARENT PATCH (PARENT '-' for the template itself).
source_of() {
    local name=$1 parent=$2 patch=$3
    rm -rf "$WORK/src/$name"
    if [[ "$parent" == - ]]; then
        mkdir -p "$WORK/src/$name"
        git -C "$ROOT" archive "$TEMPLATE_COMMIT" harness-template wit | tar -x -C "$WORK/src/$name"
        mv "$WORK/src/$name/harness-template" "$WORK/src/$name/harness"
    else
        cp -r "$WORK/src/$parent" "$WORK/src/$name"
        (cd "$WORK/src/$name/harness" && patch -s -p1 < "$DATA/$patch-diff.patch")
    fi
}
source_of a92e35 - -
source_of e2b450 a92e35 ecdysis-candidate-e2b450d84bb0
source_of c17170 a92e35 ecdysis-nofdcr-candidate-c17170ca2e30
source_of 33edd2 c17170 ecdysis-nofdcr-candidate-33edd2659a3c
source_of a3dca0 a92e35 self-evolution-candidate-a3dca0beb8fd
source_of bf02f1 a3dca0 self-evolution-candidate-bf02f1a9162f

# NAME HARNESS SPLIT TASKS [AGENT]
built=
run() {
    local name=$1 harness=$2 split=$3 tasks=$4 agent=${5:-qwen2.5-coder-1.5b-instruct}
    local src=none
    if [[ "$harness" != none ]]; then
        src="$WORK/src/$harness/harness"
        # One target directory for all, and cargo sees every harness at the
        # same path: fresh mtimes make it rebuild when the harness changes.
        if [[ "$harness" != "$built" ]]; then
            find "$WORK/src/$harness" -type f -exec touch {} +
            built=$harness
        fi
    fi
    # From $WORK, so the private MariaDB's directory goes there too.
    (cd "$WORK" && ECDYSIS_CARGO_TARGET_DIR="$WORK/target" nice -n 5 "$HOST" --store "$WORK/store" run \
        --harness "$src" --domain agentbench/dbbench --data "$ROOT/data/dbbench" \
        --split "$split" --tasks "$tasks" --trials 1 --seed 0 --concurrency 2 \
        --agent-model "$agent" --agent-base-url "$DEAD_ENDPOINT" --agent-api-key-env '' \
        --temperature 0 --max-tokens 384 --max-request-tokens 0 --agent-timeout-secs 20 \
        --cache read-only --cache-dir "$WORK/cache" --out "$WORK/runs/$name") \
        > "$WORK/logs/$name.log" 2>&1
    echo "$name: $(grep -E '^accuracy' "$WORK/logs/$name.log" | tr -s ' ') | $(grep -E '^end reasons' "$WORK/logs/$name.log" | tr -s ' ') | $(grep -oE 'cache hit rate [0-9.]+%' "$WORK/logs/$name.log")"
}
run direct-test none test "$TEST"
run direct-pool none train "$POOL"
run human-augmented-test a92e35 test "$TEST"
run transfer-0.5b-initial-test a92e35 test "$TEST" qwen2.5-coder-0.5b-instruct
run human-augmented-pool a92e35 train "$POOL"
run human-augmented-train12 a92e35 train "$TRAIN12"
run ecdysis-e2b450-train12 e2b450 train "$TRAIN12"
run ecdysis-nofdcr-c17170-test c17170 test "$TEST"
run ecdysis-nofdcr-c17170-train12 c17170 train "$TRAIN12"
run ecdysis-nofdcr-33edd2-train12 33edd2 train "$TRAIN12"
run self-evolution-a3dca0-test a3dca0 test "$TEST"
run self-evolution-a3dca0-train12 a3dca0 train "$TRAIN12"
run self-evolution-bf02f1-train12 bf02f1 train "$TRAIN12"

if [[ "${SAVE:-0}" == 1 ]]; then
    dest="$DATA/rebuilt"
    for d in "$WORK"/runs/*/; do
        n="$(basename "$d")"
        mkdir -p "$dest/$n"
        cp "$d/config.json" "$d/summary.json" "$dest/$n/"
        gzip -n -9 -c "$d/trajectories.jsonl" > "$dest/$n/trajectories.jsonl.gz"
    done
    echo "saved $(du -sh "$dest" | cut -f1) into $dest"
fi
