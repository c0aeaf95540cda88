#!/usr/bin/env bash
# Every test suite of the repository, the README's test command (CI runs it):
#
#   1. `cargo test --workspace`: the host crates' unit and end-to-end tests;
#   2. `cargo test` of harness-template (the starting harness's own tests);
#   3. runtimes/test.sh: the Python and JavaScript runtimes' suites.
#
# 2 and 3 run beside 1 once the host is built, because each half leaves CPU
# idle that the other uses: 3 runs one process at a time, and 1 spends
# stretches waiting on servers, browsers, coders and time limits.
# ECDYSIS_TEST_SERIAL=1 runs the three one after another instead (one
# readable log, or a machine too small for both).
#
# 1 prints as it goes. 2 and 3 write target/test-logs/side.log, which is
# printed when both halves have ended. The exit status is non-zero if any
# suite failed, and the summary names which.
set -uo pipefail
cd "$(dirname "$0")/.."

# The build every suite shares (runtimes/test.sh's host build is then a
# no-op); a compile error stops here, before anything runs.
cargo test --workspace --no-run || exit

side() {
    cargo test --manifest-path harness-template/Cargo.toml && bash runtimes/test.sh
}

if [ -n "${ECDYSIS_TEST_SERIAL:-}" ]; then
    cargo test --workspace && side
    exit
fi

mkdir -p target/test-logs
log=target/test-logs/side.log
echo "== harness-template and runtimes/test.sh run beside the cargo tests (log: $log)"
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

cargo test --workspace
cargo_status=$?
wait "$side_pid"
side_status=$?
trap - EXIT

echo "== harness-template and runtimes/test.sh ($log)"
cat "$log"
echo "== summary: cargo test --workspace: $([ "$cargo_status" = 0 ] && echo passed || echo "FAILED ($cargo_status)");" \
    "harness-template and runtimes: $([ "$side_status" = 0 ] && echo passed || echo "FAILED ($side_status)")"
[ "$cargo_status" = 0 ] && [ "$side_status" = 0 ]
