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

NAME=real-experiment
PORT="${PORT:-8081}"
CTX="${CTX:-8192}"
source "$(dirname "${BASH_SOURCE[0]}")/lib-real.sh"
OUT="${OUT:-runs/real-experiment}"
DOCS="${DOCS:-docs/src/results/data/real-experiment}"
TASKS="${TASKS:-0,1,2,3,4,6}"
ROLES_CTX="${ROLES_CTX:-4096}"
ROLES_MAX="${ROLES_MAX:-768}"

ensure_server
ensure_host
mkdir -p "$OUT" "$DOCS"
LOG="$OUT/experiment.log"
say "experiment into $OUT (log: $LOG)"
# One round per method, one FDCR round (Analyst → Critic → Engineer, then
# the Moderator), one follow-up turn for the coder: the smallest run in
# which every role speaks. Temperature 0 for the roles (the paper's).
run_logged "$LOG" "$HOST" experiment \
    --agent-model sim:clumsy --domain tau2/retail \
    --tasks "$TASKS" --rounds 1 --trials 1 --test-trials 3 \
    --fdcr-model "$MODEL" --coder-model "$MODEL" --fdcr-rounds 1 \
    --coder-max-feedback 1 \
    --roles-base-url "$URL" --roles-api-key-env '' \
    --roles-temperature 0 --roles-max-tokens "$ROLES_MAX" \
    --roles-context-tokens "$ROLES_CTX" --roles-timeout-secs 3600 \
    --out "$OUT"

# The small text files, for the README and review.
for f in experiment.json summary.json comparison.txt; do
    copy_if "$OUT/$f" "$DOCS/"
done
for m in self-evolution ecdysis-nofdcr ecdysis; do
    [[ -d "$OUT/$m" ]] || continue
    for f in config.json rounds.jsonl summary.json; do
        copy_if "$OUT/$m/$f" "$DOCS/$m-$f"
    done
    copy_if "$OUT/$m/rounds/1/transcript.json" "$DOCS/$m-round1-transcript.json"
    for c in "$OUT/$m"/candidates/*/; do
        [[ -f "$c/diff.patch" && "$(cat "$OUT/$m/initial" 2>/dev/null)" != "$(basename "$c")" ]] || continue
        short="$(basename "$c" | cut -c1-12)"
        cp "$c/diff.patch" "$DOCS/$m-candidate-$short-diff.patch"
        copy_if "$c/spec.json" "$DOCS/$m-candidate-$short-spec.json"
    done
done
cp "$LOG" "$DOCS/experiment.log"
say "copied the run's text files to $DOCS"
exit "$STATUS"
