#!/usr/bin/env bash
# `experiment` with real deliberation and a simulated agent: the four FDCR
# roles and the built-in editor coder are the local Qwen2.5-Coder-1.5B
# (scripts/local-llm.sh), the agent stays `sim:clumsy` (the offline testbed's
# profile), so evaluation takes seconds and the hours go to the roles and the
# coder. Every score it prints comes from a SIMULATED AGENT — not a benchmark
# result; what the run shows is how the three methods organise evidence and
# spend coder calls when the diagnosis is a real model's.
#
# Resumable: role and coder replies are cached (.ecdysis/cache), each
# method's training directory resumes, so a second run redoes nothing.
#
# Environment:
#   ECDYSIS_HOST   a built ecdysis-host binary (default: build --release)
#   PORT           llama-server port (default 8081: a second server, so the
#                  real-train run on 8080 keeps its own CPU thread); started
#                  with scripts/local-llm.sh when nothing answers there
#   ECDYSIS_LLM_DIR  the server's directory (a second server needs its own:
#                  local-llm.sh keeps one pid file per directory)
#   OUT, DOCS      experiment and documentation directories
#   TASKS          training tasks (default 0,1,2,3,4,6: sim:clumsy fails
#                  three of them, tasks 0, 3 and 4, so Self-Evolution makes
#                  three coder calls where the others make one)
#   CTX            llama-server context (default 8192)
#   ROLES_CTX      context budget of every role and coder prompt (default
#                  4096: a prompt then costs ~3-4 min on one CPU thread)
#   ROLES_MAX      tokens per role or coder reply (default 768)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-runs/real-experiment}"
DOCS="${DOCS:-docs/real-experiment}"
TASKS="${TASKS:-0,1,2,3,4,6}"
CTX="${CTX:-8192}"
ROLES_CTX="${ROLES_CTX:-4096}"
ROLES_MAX="${ROLES_MAX:-768}"
PORT="${PORT:-8081}"
MODEL="qwen2.5-coder-1.5b-instruct"
URL="http://127.0.0.1:$PORT/v1"

say() { printf '[real-experiment %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if ! curl -fsS --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    say "starting llama-server on port $PORT (context $CTX)"
    ECDYSIS_LLM_MAX_TOKENS=1024 scripts/local-llm.sh serve --ctx "$CTX" --port "$PORT" >/dev/null
fi

HOST="${ECDYSIS_HOST:-}"
if [[ -z "$HOST" ]]; then
    say "building the host (release)"
    cargo build --release -q -p ecdysis-host
    HOST="$ROOT/target/release/ecdysis-host"
fi

mkdir -p "$OUT" "$DOCS"
LOG="$OUT/experiment.log"
say "experiment into $OUT (log: $LOG)"
started=$SECONDS
set +e
# One round per method, one FDCR round (Analyst → Critic → Engineer, then
# the Moderator), one follow-up turn for the coder: the smallest run in
# which every role speaks. Temperature 0 for the roles (the paper's).
"$HOST" experiment \
    --agent-model sim:clumsy --domain tau2/retail \
    --tasks "$TASKS" --rounds 1 --trials 1 --test-trials 3 \
    --fdcr-model "$MODEL" --coder-model "$MODEL" --fdcr-rounds 1 \
    --coder-max-feedback 1 \
    --roles-base-url "$URL" --roles-api-key-env '' \
    --roles-temperature 0 --roles-max-tokens "$ROLES_MAX" \
    --roles-context-tokens "$ROLES_CTX" --roles-timeout-secs 3600 \
    --out "$OUT" 2>&1 | while IFS= read -r line; do
        printf '%s %s\n' "$(date -u +%H:%M:%S)" "$line"
    done | tee -a "$LOG"
status=${PIPESTATUS[0]}
set -e
say "experiment exited with $status after $((SECONDS - started)) s"

# The small text files, for the README and review.
for f in experiment.json summary.json comparison.txt; do
    [[ -f "$OUT/$f" ]] && cp "$OUT/$f" "$DOCS/"
done
for m in self-evolution ecdysis-nofdcr ecdysis; do
    [[ -d "$OUT/$m" ]] || continue
    for f in config.json rounds.jsonl summary.json; do
        [[ -f "$OUT/$m/$f" ]] && cp "$OUT/$m/$f" "$DOCS/$m-$f"
    done
    [[ -f "$OUT/$m/rounds/1/transcript.json" ]] && cp "$OUT/$m/rounds/1/transcript.json" "$DOCS/$m-round1-transcript.json"
    for c in "$OUT/$m"/candidates/*/; do
        [[ -f "$c/diff.patch" && "$(cat "$OUT/$m/initial" 2>/dev/null)" != "$(basename "$c")" ]] || continue
        short="$(basename "$c" | cut -c1-12)"
        cp "$c/diff.patch" "$DOCS/$m-candidate-$short-diff.patch"
        [[ -f "$c/spec.json" ]] && cp "$c/spec.json" "$DOCS/$m-candidate-$short-spec.json"
    done
done
cp "$LOG" "$DOCS/experiment.log"
say "copied the run's text files to $DOCS"
exit "$status"
