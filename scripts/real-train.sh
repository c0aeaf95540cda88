#!/usr/bin/env bash
# One training run with a real model in every role, on this machine.
#
# The agent, the user simulator, the four FDCR roles (Analyst, Critic,
# Engineer, Moderator) and the built-in editor coder are all the local
# Qwen2.5-Coder-1.5B served by llama-server (scripts/local-llm.sh). τ² retail:
# a pool of training tasks, of which --select-train failure-aware keeps a few;
# one round; then the held-out test of the initial and the final harness on a
# few test tasks. Resumable: run it again after an interruption and finished
# work is not redone (episodes, the round, the test).
#
# Everything the run writes goes to $OUT (default runs/real-train); at the
# end the small text files (config, selection, round log, summary, the FDCR
# discussion and the coder's run, the candidate's spec and diff, the log)
# are copied to $DOCS (default docs/src/results/data/real-train).
#
# Environment (the defaults are what the documented run used, 2026-11-30,
# see README "Real models in every role"; on 2 shared CPU cores one agent
# turn late in an episode takes 20-60 s and one episode 10-25 min, so the run
# is kept small on purpose):
#   ECDYSIS_LLM_DIR   where scripts/local-llm.sh keeps the model and server
#   ECDYSIS_HOST      a built ecdysis-host binary (default: build --release)
#   OUT, DOCS         run and documentation directories
#   POOL              training tasks to select from (default 0,1,2)
#   BUDGET            training tasks kept (default 2)
#   TEST_TASKS        held-out task ids (default 5: one task, initial and
#                     final each evaluated once)
#   TEST_TRIALS       trials per held-out task (default 1: the paper's 3
#                     would triple the hours of the test phase)
#   CTX               llama-server context (default 16384: the agent's
#                     conversation alone reaches ~7k tokens with the τ²
#                     policy and tool schemas)
#   ROLES_CTX         context budget of the role and coder prompts (default
#                     8192; the budget's estimate runs 1.4-1.5x the real
#                     token count, so real prompts stay near 5.5k)
set -euo pipefail

NAME=real-train
PORT="${PORT:-8080}"
# A context long enough for the agent's growing conversation (the τ² policy
# and tool schemas alone are ~6k tokens).
CTX="${CTX:-16384}"
source "$(dirname "${BASH_SOURCE[0]}")/lib-real.sh"
OUT="${OUT:-runs/real-train}"
DOCS="${DOCS:-docs/src/results/data/real-train}"
POOL="${POOL:-0,1,2}"
BUDGET="${BUDGET:-2}"
TEST_TASKS="${TEST_TASKS:-5}"
TEST_TRIALS="${TEST_TRIALS:-1}"
ROLES_CTX="${ROLES_CTX:-8192}"

ensure_server
ensure_host
mkdir -p "$OUT" "$DOCS"
LOG="$OUT/train.log"
say "training into $OUT (log: $LOG)"
# Temperature 0 for the agent and the roles (the paper's setting); the LLM
# user samples at the server's default, so the gate re-measures the
# incumbent each round. One episode at a time: one CPU thread serves all.
run_logged "$LOG" "$HOST" train \
    --method ecdysis --rounds 1 \
    --domain tau2/retail --tasks "$POOL" \
    --select-train failure-aware --budget-tasks "$BUDGET" \
    --test-tasks "$TEST_TASKS" --test-trials "$TEST_TRIALS" \
    --agent-model "$MODEL" --agent-base-url "$URL" --agent-api-key-env '' \
    --user-model "$MODEL" --user-base-url "$URL" \
    --temperature 0 --max-tokens 256 --max-steps 20 \
    --agent-timeout-secs 3600 --concurrency 1 \
    --fdcr-model "$MODEL" --coder-model "$MODEL" \
    --roles-base-url "$URL" --roles-api-key-env '' \
    --roles-temperature 0 --roles-max-tokens 1024 \
    --roles-context-tokens "$ROLES_CTX" --roles-timeout-secs 7200 \
    --out "$OUT"

# The small text files, for the README and review.
for f in config.json selection.json rounds.jsonl summary.json; do
    copy_if "$OUT/$f" "$DOCS/"
done
copy_if "$OUT/rounds/1/transcript.json" "$DOCS/round1-transcript.json"
cand="$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(r[0].get("candidate") or "")' "$OUT/rounds.jsonl" 2>/dev/null || true)"
if [[ -n "$cand" && -d "$OUT/candidates/$cand" ]]; then
    for f in spec.json diff.patch train_summary.json; do
        copy_if "$OUT/candidates/$cand/$f" "$DOCS/candidate-$f"
    done
fi
cp "$LOG" "$DOCS/train.log"
say "copied the run's text files to $DOCS"
exit "$STATUS"
