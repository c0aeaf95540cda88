#!/usr/bin/env bash
# Build times of two commits, side by side in one run: a clean release build
# of the binary, a clean `cargo test --no-run`, and incremental rebuilds
# after touching one file of the service, of the τ² environment, of training
# and of the report: the release binary, the test binaries, and the
# development binary (`cargo build -p ecdysis-host`, the dev profile: the
# edit-to-binary loop of someone working on the host). Steps alternate between the two trees so both see the same load;
# read the ratios, not the seconds, on a busy machine.
#
#   scripts/build-times.sh [BEFORE] [AFTER]
#
# BEFORE defaults to the last single-crate commit (777b60a^), AFTER to HEAD.
# Each commit gets a detached worktree and its own target directory under
# $WORK (default target/build-times); rerunning starts clean, unless
# INCREMENTAL_ONLY=1: then the target directories are kept, both trees are
# built untimed first, and only the incremental steps are timed. Output: one
# line per step on stdout and $WORK/times.tsv (step, before s, after s,
# after/before).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BEFORE=${1:-777b60a^}
AFTER=${2:-HEAD}
WORK=${WORK:-$ROOT/target/build-times}

before_rev=$(git rev-parse --short "$BEFORE")
after_rev=$(git rev-parse --short "$AFTER")
for side in before after; do
    git worktree remove --force "$WORK/$side" 2>/dev/null || rm -rf "${WORK:?}/$side"
done
git worktree prune
mkdir -p "$WORK"
git worktree add --detach "$WORK/before" "$before_rev" >/dev/null
git worktree add --detach "$WORK/after" "$after_rev" >/dev/null
if [ "${INCREMENTAL_ONLY:-0}" != 1 ]; then
    rm -rf "$WORK/target-before" "$WORK/target-after"
fi

# The file of each area in either layout (single crate: host/src/<area>/,
# workspace: host/<crate>/src/).
file_of() { # side area
    local tree=$WORK/$1
    case $2 in
    service) for f in host/serve/src/quota.rs host/src/serve/quota.rs; do [ -f "$tree/$f" ] && echo "$f" && return; done ;;
    tau2) for f in host/tau2/src/retail.rs host/env/src/tau2/retail.rs host/src/env/tau2/retail.rs; do [ -f "$tree/$f" ] && echo "$f" && return; done ;;
    evolve) for f in host/evolve/src/accept.rs host/evolve/src/gate/accept.rs host/src/evolve/accept.rs; do [ -f "$tree/$f" ] && echo "$f" && return; done ;;
    report) for f in host/report/src/charts.rs host/src/report/charts.rs; do [ -f "$tree/$f" ] && echo "$f" && return; done ;;
    esac
    echo "no $2 file in $tree" >&2
    exit 1
}

timed() { # side command... -> seconds on stdout
    local side=$1
    shift
    local start end
    start=$(date +%s.%N)
    (cd "$WORK/$side" && CARGO_TARGET_DIR="$WORK/target-$side" "$@" >"$WORK/$side.log" 2>&1) \
        || { echo "$side: $* failed, see $WORK/$side.log" >&2; tail -20 "$WORK/$side.log" >&2; exit 1; }
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

printf 'step\tbefore (%s) s\tafter (%s) s\tafter/before\n' "$before_rev" "$after_rev" | tee "$WORK/times.tsv"
step() { # name command...
    local name=$1
    shift
    local b a
    b=$(timed before "$@")
    a=$(timed after "$@")
    printf '%s\t%.0f\t%.0f\t%.2f\n' "$name" "$b" "$a" "$(echo "$a / $b" | bc -l)" | tee -a "$WORK/times.tsv"
}

if [ "${INCREMENTAL_ONLY:-0}" = 1 ]; then
    for side in before after; do
        echo "warming $side (untimed)" >&2
        timed "$side" cargo build --release -p ecdysis-host >/dev/null
        timed "$side" cargo test --workspace --no-run >/dev/null
        timed "$side" cargo build -p ecdysis-host >/dev/null
    done
else
    step "clean cargo build --release -p ecdysis-host" cargo build --release -p ecdysis-host
    step "clean cargo test --workspace --no-run" cargo test --workspace --no-run
    step "cargo build -p ecdysis-host (dev, after the test build)" cargo build -p ecdysis-host
fi
for area in service tau2 evolve report; do
    touch "$WORK/before/$(file_of before $area)" "$WORK/after/$(file_of after $area)"
    step "touch $area file, cargo build --release -p ecdysis-host" cargo build --release -p ecdysis-host
    touch "$WORK/before/$(file_of before $area)" "$WORK/after/$(file_of after $area)"
    step "touch $area file, cargo test --workspace --no-run" cargo test --workspace --no-run
    touch "$WORK/before/$(file_of before $area)" "$WORK/after/$(file_of after $area)"
    step "touch $area file, cargo build -p ecdysis-host (dev)" cargo build -p ecdysis-host
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$WORK/times.tsv"
