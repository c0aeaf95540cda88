#!/usr/bin/env bash
# Every test suite of the repository, the README's test command (CI runs it),
# after scripts/test-deps.sh has installed what the suites need beyond the
# Rust toolchain:
#
#   1. the host crates' integration tests named `it` (`cargo test
#      --workspace --test it`), the command-line suite the longest of them;
#   2. beside them, the runner's and evolution's integration tests (named
#      `runner` and `evolve` for this) and the host crates' unit and doc
#      tests;
#   3. and beside both, the starting harness's own tests (harness-template)
#      and runtimes/test.sh (the Python and JavaScript runtimes' suites).
#
# Before them, `bench --runner --check` compares the host's own work per
# episode with its recorded baseline (tests/runner-bench/baseline.json).
#
# Together that is `cargo test --workspace` and the two other suites. The
# three lanes run side by side once the host is built because each leaves
# CPU idle that the others use: runtimes/test.sh runs one process at a
# time, and the integration tests spend stretches waiting on servers,
# browsers, coders and time limits. An integration suite must be named
# `it`, `runner` or `evolve` to run here. ECDYSIS_TEST_SERIAL=1 runs
# everything one suite after another instead (one readable log, or a
# machine too small for it).
#
# Every test binary runs even after one fails (--no-fail-fast), so one run
# shows every failure. The first lane prints as it goes; the others write
# target/test-logs/side.log and others.log, printed when all have ended.
# The exit status is non-zero if any suite failed, and the summary names
# which.
set -uo pipefail
cd "$(dirname "$0")/.."

# As CI (.ci/run) runs them: every harness build of the suites shares one
# cargo target, and every store one native-code directory, which also keeps
# Rust harness builds by source, so the starting harness that most training
# tests build is compiled once per run, not once per test. Either can be
# set to another directory.
export ECDYSIS_CARGO_TARGET_DIR="${ECDYSIS_CARGO_TARGET_DIR:-$PWD/target/evolve-candidates}"
export ECDYSIS_NATIVE_CACHE="${ECDYSIS_NATIVE_CACHE:-$PWD/target/native-cache}"

# What the suites need beyond the Rust toolchain (system packages, mdbook,
# the wasm target, the Python tools): installed when missing, and the reason
# to stop here, before building, when it cannot be.
bash scripts/test-deps.sh || exit

# The build every suite shares (runtimes/test.sh's host build is then a
# no-op); a compile error stops here, before anything runs.
cargo test --workspace --no-run || exit

# The host's own work per episode against its recorded multiple of the
# waiting floor (`bench --runner --check`, Direct and the pass-through
# guest, the test build's entries): a change that makes the runner's host
# work grow by the baseline's tolerance fails here. It runs before the
# suites, so that the machine is as quiet as when the baseline was recorded.
runner_check() {
    local status=0 harness
    for harness in none guests/direct; do
        target/debug/ecdysis-host bench --runner --harness "$harness" --trials 3 \
            --latency-ms 50 --repeat 3 --check tests/runner-bench/baseline.json || status=1
    done
    return "$status"
}
echo "== the runner's host work against its recorded baseline (tests/runner-bench/baseline.json)"
runner_check
runner_status=$?

# The same build as above: selecting targets, unlike selecting packages,
# leaves cargo's feature resolution (and so every artifact) unchanged.
# Each suite runs even after another failed; the status says whether any did.
cargo_side() {
    local status=0
    cargo test --workspace --no-fail-fast --test runner --test evolve || status=1
    cargo test --workspace --no-fail-fast --lib --bins || status=1
    cargo test --workspace --no-fail-fast --doc || status=1
    return "$status"
}
# The starting harness's tests build in the harness builds' shared target
# (.ci/run lints the guests into it), for this machine's triple named
# explicitly: cargo then builds the wit-bindgen macros as it does for the
# guests' wasm32 builds, so the lint build's copy serves both.
harness_target=${ECDYSIS_CARGO_TARGET_DIR:-$PWD/target/evolve-candidates}
host_triple=$(rustc -vV | sed -n 's/^host: //p')
others() {
    local status=0
    cargo test --manifest-path harness-template/Cargo.toml \
        --target "$host_triple" --target-dir "$harness_target" || status=1
    bash runtimes/test.sh || status=1
    return "$status"
}

if [ -n "${ECDYSIS_TEST_SERIAL:-}" ]; then
    status=0
    cargo test --workspace --no-fail-fast || status=1
    others || status=1
    [ "$runner_status" = 0 ] || status=1
    exit "$status"
fi

mkdir -p target/test-logs
cargo_log=target/test-logs/side.log
others_log=target/test-logs/others.log
echo "== beside the integration tests named it: the runner's and evolution's integration tests and the unit and doc tests (log: $cargo_log); harness-template and runtimes/test.sh (log: $others_log)"
# A lane: one function's suites, then its time.
lane() {
    SECONDS=0
    "$1"
    local status=$?
    echo "== this lane took $SECONDS s"
    return "$status"
}
lane cargo_side > "$cargo_log" 2>&1 &
cargo_side_pid=$!
lane others > "$others_log" 2>&1 &
others_pid=$!
# A stopped script stops its background lanes too (the whole tree: a
# background job of a script ignores the terminal's Ctrl-C).
kill_tree() {
    local child
    for child in $(pgrep -P "$1"); do kill_tree "$child"; done
    kill -TERM "$1" 2>/dev/null
}
trap 'kill_tree "$cargo_side_pid"; kill_tree "$others_pid"' EXIT
trap 'exit 130' INT TERM

SECONDS=0
cargo test --workspace --no-fail-fast --test it
it_status=$?
echo "== the integration tests named it took $SECONDS s"
wait "$cargo_side_pid"
cargo_side_status=$?
wait "$others_pid"
others_status=$?
trap - EXIT

echo "== the runner's and evolution's integration tests, unit and doc tests ($cargo_log)"
cat "$cargo_log"
echo "== harness-template and runtimes/test.sh ($others_log)"
cat "$others_log"
verdict() { if [ "$1" = 0 ]; then echo passed; else echo "FAILED (status $1)"; fi; }
echo "== summary: integration tests named it $(verdict "$it_status");" \
    "the runner's, evolution's, unit and doc tests $(verdict "$cargo_side_status");" \
    "harness-template, runtimes $(verdict "$others_status");" \
    "the runner's baseline check $(verdict "$runner_status")"
[ "$it_status" = 0 ] && [ "$cargo_side_status" = 0 ] && [ "$others_status" = 0 ] && [ "$runner_status" = 0 ]
