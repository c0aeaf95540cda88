#!/usr/bin/env bash
# Every test suite of the repository, the README's test command (CI runs it):
#
#   1. the host crates' integration tests named `it` (`cargo test
#      --workspace --test it`), the command-line suite the longest of them;
#   2. beside them: the runner's integration tests (named `runner` for
#      this), the host crates' unit and doc tests, the starting harness's
#      own tests (harness-template), and runtimes/test.sh (the Python and
#      JavaScript runtimes' suites).
#
# Together that is `cargo test --workspace` and the two other suites. The
# halves run side by side once the host is built because each leaves CPU
# idle that the other uses: runtimes/test.sh runs one process at a time,
# and the integration tests spend stretches waiting on servers, browsers,
# coders and time limits. An integration suite must be named `it` or
# `runner` to run here. ECDYSIS_TEST_SERIAL=1 runs everything one suite
# after another instead (one readable log, or a machine too small for both).
#
# Every test binary runs even after one fails (--no-fail-fast), so one run
# shows every failure. The first half prints as it goes. The second writes
# target/test-logs/side.log, printed when both halves have ended. The exit
# status is non-zero if any suite failed, and the summary names which.
set -uo pipefail
cd "$(dirname "$0")/.."

# The build every suite shares (runtimes/test.sh's host build is then a
# no-op); a compile error stops here, before anything runs.
cargo test --workspace --no-run || exit

# The same build as above: selecting targets, unlike selecting packages,
# leaves cargo's feature resolution (and so every artifact) unchanged.
# Each suite runs even after another failed; the status says whether any did.
side() {
    local status=0
    cargo test --workspace --no-fail-fast --test runner || status=1
    cargo test --workspace --no-fail-fast --lib --bins || status=1
    cargo test --workspace --no-fail-fast --doc || status=1
    others || status=1
    return "$status"
}
others() {
    local status=0
    cargo test --manifest-path harness-template/Cargo.toml || status=1
    bash runtimes/test.sh || status=1
    return "$status"
}

if [ -n "${ECDYSIS_TEST_SERIAL:-}" ]; then
    status=0
    cargo test --workspace --no-fail-fast || status=1
    others || status=1
    exit "$status"
fi

mkdir -p target/test-logs
log=target/test-logs/side.log
echo "== the runner's integration tests, unit and doc tests, harness-template and runtimes/test.sh run beside the other integration tests (log: $log)"
side > "$log" 2>&1 &
side_pid=$!
# A stopped script stops its background half too (the whole tree: a
# background job of a script ignores the terminal's Ctrl-C).
kill_tree() {
    local child
    for child in $(pgrep -P "$1"); do kill_tree "$child"; done
    kill -TERM "$1" 2>/dev/null
}
trap 'kill_tree "$side_pid"' EXIT
trap 'exit 130' INT TERM

cargo test --workspace --no-fail-fast --test it
cargo_status=$?
wait "$side_pid"
side_status=$?
trap - EXIT

echo "== the runner's integration tests, unit and doc tests, harness-template and runtimes/test.sh ($log)"
cat "$log"
verdict() { if [ "$1" = 0 ]; then echo passed; else echo "FAILED (status $1)"; fi; }
echo "== summary: integration tests named it $(verdict "$cargo_status");" \
    "the runner's, unit and doc tests, harness-template, runtimes $(verdict "$side_status")"
[ "$cargo_status" = 0 ] && [ "$side_status" = 0 ]
