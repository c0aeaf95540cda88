#!/usr/bin/env bash
# Build the JavaScript-authored example harness (guests/js/harness.js) with
# componentize-js from npm, then check it and run it on four retail tasks
# with a simulated agent, through the host's virtual WASI. Not part of CI
# (componentize-js and the first compile of SpiderMonkey take minutes); the
# docs' guide records a run.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=target/js-tools
HOST=${HOST:-target/release/ecdysis-host}
[ -x "$HOST" ] || cargo build --release -p ecdysis-host
if [ ! -x "$TOOLS/node_modules/.bin/componentize-js" ]; then
  mkdir -p "$TOOLS"
  (cd "$TOOLS" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error @bytecodealliance/componentize-js@0.23.0)
fi
OUT=target/js-harness
mkdir -p "$OUT"
echo "== build (componentize-js; wasi:http and fetch-event disabled: no host grants them)"
time "$TOOLS/node_modules/.bin/componentize-js" --wit wit --world-name harness -d http -d fetch-event \
  -o "$OUT/harness.wasm" guests/js/harness.js
ls -l "$OUT/harness.wasm"
echo "== inspect, check (the first compile of SpiderMonkey takes minutes)"
"$HOST" inspect "$OUT/harness.wasm"
time "$HOST" check "$OUT/harness.wasm"
echo "== run on four retail tasks (simulated agent: not a benchmark result)"
# SpiderMonkey interprets (no JIT in a component): the retail contract hook
# needs more than the default fuel (measured in docs: the Python/JS guide).
"$HOST" run --harness "$OUT/harness.wasm" --tasks 5,9,12,17 --agent-model sim:mixed --force-new --out "$OUT/run" \
  --fuel 100000000
