#!/usr/bin/env bash
# The real-model experiment on AgentBench DBBench: every method, every role
# the local Qwen2.5-Coder-1.5B (scripts/local-llm.sh), one directory.
#
# EXPERIMENT=2 (the default) is the second attempt (issue #51): failures
# grouped by mechanism, the realization primitives in the edit vocabulary,
# a hand-configured baseline (scripts/hand-configured/tables-dbbench.json:
# the primitives a person switched on from the first experiment's
# diagnosis, the ceiling the vocabulary allows) and a fresh held-out split
# of 66 `test` tasks none of which the first experiment used. EXPERIMENT=1
# replays the first experiment (its split, its directory, its snapshot).
#
# Direct and Human-Augmented (harness-template as written) are the
# untrained baselines; Ecdysis, Ecdysis without FDCR and Self-Evolution
# each train from Human-Augmented on the same failure-aware subset of the
# training pool, up to three rounds, with the same seeds; then the initial
# and every final harness are tested on the same held-out tasks (the
# initial harness's test episodes come from the response cache for every
# method after the first, so they are shared). The Ecdysis result is also
# tested with the 0.5B model as agent (cross-model transfer, a second
# server on PORT_05B).
#
# Resumable: stop it at any point (Ctrl-C, kill, a reboot) and run it again;
# finished episodes, rounds and tests are not redone (the run directories
# resume, and every model reply is in the response cache). Progress lines
# with an ETA go to the terminal and to $OUT/experiment.log.
#
# On another machine (or a fresh clone): every model reply of the recorded
# run is in $SNAPSHOT (a tarball of the response-cache entries, committed
# with the results); it is unpacked into the cache first, so a rerun replays
# the recorded replies and only asks the model what they do not cover.
# `SAVE=1 scripts/real-dbbench.sh` only writes the snapshot and the run's
# small files into $DOCS, then exits.
#
# The coder is the table coder (--coder-format tables): the model answers
# with a JSON list of rule-table edits, which the host writes into the
# harness; the Moderator's spec and the coder's edits are constrained to
# their JSON schemas by the server (--structured-output).
#
# Environment:
#   ECDYSIS_HOST   a built ecdysis-host binary (default: build --release)
#   OUT            experiment directory (default runs/real-dbbench)
#   PORT, PORT_05B llama-server ports of the 1.5B and 0.5B models (8080, 8081)
#   CTX            server context, split over PARALLEL slots (default 24576)
#   THREADS        server threads (default 2); PARALLEL requests at once (2)
#   POOL           training tasks to select from (36 tasks of `train`)
#   BUDGET         training tasks kept by the selection (12)
#   SELECT         how they are selected: failure-aware (the recorded run's),
#                  or recurring (two tasks of each recurring failure
#                  signature; a new run needs its own OUT)
#   TEST_TASKS     held-out tasks (experiment 2: 66 tasks of `test`;
#                  experiment 1: 40)
#   ROLES_MAX_TOKENS  the roles' reply cap (experiment 2: 1024, so the
#                  Analyst can cover every recurring group; 1: 768)
#   ROUNDS         rounds per method (3)
#   TRANSFER       1 to test on the 0.5B model too (default 1)
#   MAX_REQUEST_TOKENS  cap on one agent request (default 0: none; the
#                  server refuses a request past its context itself)
#   DOCS           where the results' files go (docs/src/results/data/real-dbbench)
#   SNAPSHOT       the cache snapshot ($DOCS/cache.tar.gz)
set -euo pipefail

EXPERIMENT="${EXPERIMENT:-2}"
NAME="real-dbbench-$EXPERIMENT"
PORT="${PORT:-8080}"
CTX="${CTX:-24576}"
THREADS="${THREADS:-2}"
PARALLEL="${PARALLEL:-2}"
source "$(dirname "${BASH_SOURCE[0]}")/lib-real.sh"
case "$EXPERIMENT" in
    1) OUT="${OUT:-runs/real-dbbench}" ;;
    2) OUT="${OUT:-runs/real-dbbench-2}" ;;
    *) echo "EXPERIMENT must be 1 or 2, got $EXPERIMENT" >&2; exit 2 ;;
esac
PORT_05B="${PORT_05B:-8081}"
ROUNDS="${ROUNDS:-3}"
BUDGET="${BUDGET:-12}"
SELECT="${SELECT:-failure-aware}"
TRANSFER="${TRANSFER:-1}"
# Both lists were drawn once, stratified by task type (SELECT kinds,
# INSERT, UPDATE) with a seeded shuffle, and are fixed here so that every
# rerun and every method sees the same tasks.
POOL="${POOL:-standard-0,standard-10,standard-22,standard-24,standard-34,standard-48,standard-63,standard-64,standard-65,standard-78,standard-93,standard-96,standard-104,standard-108,standard-116,standard-121,standard-124,standard-127,standard-140,standard-161,standard-166,standard-195,standard-196,standard-197,standard-203,standard-205,standard-207,standard-211,standard-213,standard-231,standard-232,standard-234,standard-280,standard-285,standard-289,standard-299}"
FIRST_TEST_TASKS="standard-4,standard-13,standard-15,standard-20,standard-23,standard-35,standard-45,standard-55,standard-58,standard-60,standard-77,standard-91,standard-92,standard-99,standard-100,standard-102,standard-117,standard-128,standard-131,standard-142,standard-153,standard-155,standard-163,standard-167,standard-170,standard-181,standard-190,standard-233,standard-236,standard-238,standard-254,standard-259,standard-263,standard-268,standard-273,standard-276,standard-284,standard-290,standard-295,standard-296"
# The second experiment's held-out split: the 112 `test` tasks the first
# did not use, stratified as the first (SELECT kinds, INSERT, UPDATE: 22
# each), drawn once with Python's random.Random(51) shuffling each stratum
# in id order, and fixed here before any training of the second experiment
# ran. With 66 tasks the one-sided paired sign-flip test at p < 0.05 needs
# at least 5 tasks won and none lost (then 7 won against 1 lost, 9 against
# 2): the smallest gain it can show is 5 tasks (7.6 points).
SECOND_TEST_TASKS="standard-1,standard-3,standard-7,standard-8,standard-9,standard-12,standard-17,standard-19,standard-21,standard-25,standard-31,standard-36,standard-47,standard-49,standard-51,standard-53,standard-62,standard-66,standard-69,standard-72,standard-85,standard-87,standard-110,standard-113,standard-120,standard-125,standard-126,standard-130,standard-133,standard-135,standard-141,standard-145,standard-146,standard-147,standard-149,standard-150,standard-156,standard-158,standard-162,standard-173,standard-179,standard-182,standard-184,standard-199,standard-204,standard-210,standard-214,standard-217,standard-219,standard-221,standard-223,standard-229,standard-235,standard-241,standard-242,standard-247,standard-255,standard-257,standard-264,standard-267,standard-271,standard-275,standard-282,standard-287,standard-293,standard-294"
if [[ "$EXPERIMENT" == 1 ]]; then
    TEST_TASKS="${TEST_TASKS:-$FIRST_TEST_TASKS}"
    ROLES_MAX_TOKENS="${ROLES_MAX_TOKENS:-768}"
    DOCS="${DOCS:-docs/src/results/data/real-dbbench}"
    extra=()
else
    TEST_TASKS="${TEST_TASKS:-$SECOND_TEST_TASKS}"
    ROLES_MAX_TOKENS="${ROLES_MAX_TOKENS:-1024}"
    DOCS="${DOCS:-docs/src/results/data/real-dbbench-2}"
    extra=(--hand-configured scripts/hand-configured/tables-dbbench.json)
fi

SNAPSHOT="${SNAPSHOT:-$DOCS/cache.tar.gz}"
# The first experiment's replies: the second asks many of the same requests
# (Human-Augmented's episodes on the shared pool, its tables being off).
FIRST_SNAPSHOT=docs/src/results/data/real-dbbench/cache.tar.gz
CACHE=.ecdysis/cache

# The run's small files and every cached reply, for the results page and a
# resume elsewhere.
# A run directory rebuilt from the cache on another machine (marked
# $REBUILT) replays the recorded stages with cache hits and seconds of
# work: its ledgers, round times and summaries of those stages are not the
# run's, so they never replace the recorded files. Where they differ they
# go to $DOCS/rebuilt/ instead (a stage that was under way goes on there with
# fresh calls, but for the files it only appended to); what the recorded run
# has not saved yet (later stages) is saved as usual.
REBUILT="$OUT/rebuilt-from-cache"
keep() {
    [[ -f "$1" ]] || return 0
    # A recorded file the run only appended to (the rounds of a stage that
    # was under way when the record was saved) is the same record, continued.
    if [[ -f "$REBUILT" && -f "$2" ]] && ! cmp -s -n "$(stat -c %s "$2")" "$1" "$2"; then
        mkdir -p "$DOCS/rebuilt"
        cp "$1" "$DOCS/rebuilt/$(basename "$2")"
        return 0
    fi
    cmp -s "$1" "$2" || cp "$1" "$2"
}
save() {
    mkdir -p "$DOCS"
    copy_if "$OUT/experiment.log" "$DOCS/"
    keep "$OUT/experiment.json" "$DOCS/experiment.json"
    for m in baselines hand-configured self-evolution ecdysis-nofdcr ecdysis; do
        [[ -d "$OUT/$m" ]] || continue
        for f in config.json selection.json rounds.jsonl summary.json ledger.json; do
            keep "$OUT/$m/$f" "$DOCS/$m-$f"
        done
        for t in "$OUT/$m"/rounds/*/transcript.json; do
            [[ -f "$t" ]] || continue
            n="$(basename "$(dirname "$t")")"
            keep "$t" "$DOCS/$m-round$n-transcript.json"
        done
        # Measured accommodation: each accepted change and its parent with
        # the transfer model on the training tasks.
        for a in "$OUT/$m"/accommodation/*/; do
            [[ -f "$a/summary.json" ]] || continue
            n="$(basename "$a")"
            gzip -c "$a/trajectories.jsonl" > "$a/trajectories.jsonl.gz"
            keep "$a/summary.json" "$DOCS/$m-accommodation-$n-summary.json"
            keep "$a/trajectories.jsonl.gz" "$DOCS/$m-accommodation-$n-trajectories.jsonl.gz"
        done
        for c in "$OUT/$m"/candidates/*/; do
            [[ -f "$c/diff.patch" ]] || continue
            short="$(basename "$c" | cut -c1-12)"
            keep "$c/diff.patch" "$DOCS/$m-candidate-$short-diff.patch"
            keep "$c/spec.json" "$DOCS/$m-candidate-$short-spec.json"
        done
    done
    tar -czf "$SNAPSHOT.partial" -C "$CACHE" . && mv "$SNAPSHOT.partial" "$SNAPSHOT"
    say "saved the run's files and $(du -h "$SNAPSHOT" | cut -f1) of cached replies to $DOCS"
}
if [[ "${SAVE:-0}" == 1 ]]; then
    save
    exit 0
fi
for snap in "$FIRST_SNAPSHOT" "$SNAPSHOT"; do
    if [[ -f "$snap" ]]; then
        mkdir -p "$CACHE"
        say "unpacking the recorded replies of $snap into $CACHE"
        tar -xzf "$snap" -C "$CACHE" --skip-old-files
    fi
done

ensure_server
transfer=(--transfer none)
if [[ "$TRANSFER" == 1 ]]; then
    if ! curl -fsS --max-time 2 "http://127.0.0.1:$PORT_05B/health" >/dev/null 2>&1; then
        say "starting the 0.5B llama-server on port $PORT_05B (for the transfer test)"
        # A second server keeps its own pid file: its own directory of
        # state, the same weights and build.
        LLM_DIR="${ECDYSIS_LLM_DIR:-$ROOT/.ecdysis/llm}"
        mkdir -p "$LLM_DIR/0.5b-server"
        for d in build models src tools; do
            ln -sfn "$LLM_DIR/$d" "$LLM_DIR/0.5b-server/$d"
        done
        ECDYSIS_LLM_DIR="$LLM_DIR/0.5b-server" ECDYSIS_LLM_MAX_TOKENS=1024 \
            scripts/local-llm.sh serve --model 0.5b --port "$PORT_05B" --ctx 8192 >/dev/null
    fi
    transfer=(--transfer "qwen2.5-coder-0.5b-instruct@http://127.0.0.1:$PORT_05B/v1")
fi
ensure_host
mkdir -p "$OUT"
# The second experiment starts from the starting harness of commit 5570543
# (the tree's harness-template and wit/ have not changed since): its later
# stages (the hand-configured baseline copies the source) and a rebuild on a
# fresh machine read that commit's source, kept beside the run, so main's
# template can change while the run goes on. Each method builds from a
# staged copy, so the source's path leaves the build's bytes alone (checked:
# `experiment --source` of the kept copy and of ./harness-template build the
# same 51bd6739c0e3).
if [[ "$EXPERIMENT" == 2 ]]; then
    SOURCE_COMMIT=5570543
    PINNED="$OUT.source-$SOURCE_COMMIT"
    if [[ ! -d "$PINNED/harness-template" ]]; then
        rm -rf "$PINNED.partial"
        mkdir -p "$PINNED.partial"
        git archive "$SOURCE_COMMIT" harness-template wit | tar -x -C "$PINNED.partial"
        rm -rf "$PINNED"
        mv "$PINNED.partial" "$PINNED"
        say "the starting harness's source of $SOURCE_COMMIT is in $PINNED"
    fi
    extra+=(--source "$PINNED/harness-template")
fi
if ! compgen -G "$OUT/*/config.json" >/dev/null && compgen -G "$DOCS/*-rounds.jsonl" >/dev/null; then
    date -u +%FT%TZ > "$REBUILT"
    say "rebuilding $OUT from the recorded replies: the recorded files in $DOCS are kept"
fi
LOG="$OUT/experiment.log"
# A fresh machine replays the recorded run into a new $OUT: its log goes on
# from the recorded one (put before whatever a failed start wrote), so that
# saving it never puts a shorter log over the results' copy.
if [[ -f "$DOCS/experiment.log" ]] && ! cmp -s -n "$(stat -c %s "$DOCS/experiment.log")" "$DOCS/experiment.log" "$LOG"; then
    { cat "$DOCS/experiment.log"; if [[ -f "$LOG" ]]; then cat "$LOG"; fi; } > "$LOG.partial" && mv "$LOG.partial" "$LOG"
    say "continuing the recorded log $DOCS/experiment.log"
fi
say "experiment into $OUT (log: $LOG)"
# Temperature 0 for the agent and the roles (the paper's setting). The
# agent's replies are capped at 384 tokens: DBBench needs one statement per
# turn, and a small model that rambles would otherwise spend minutes a turn.
# Both experiments ran with the roles' per-turn prompt layout (the only one
# then): it is named so that a replay asks the recorded requests, which the
# snapshots' replies are keyed on. A binary from before the option has only
# that layout and does not know the flag.
layout=()
if "$HOST" experiment --help 2>/dev/null | grep -q -- '--roles-layout'; then
    layout=(--roles-layout per-turn)
fi
run_logged "$LOG" "$HOST" experiment \
    --domain agentbench/dbbench \
    --agent-model "$MODEL" --agent-base-url "$URL" --agent-api-key-env '' \
    --temperature 0 --max-tokens 384 --agent-timeout-secs 1800 \
    --max-request-tokens "${MAX_REQUEST_TOKENS:-0}" \
    --concurrency "$PARALLEL" \
    --tasks "$POOL" --select-train "$SELECT" --budget-tasks "$BUDGET" \
    --rounds "$ROUNDS" --trials 1 \
    --test-tasks "$TEST_TASKS" --test-trials 1 \
    --fdcr-model "$MODEL" --fdcr-rounds 1 \
    --coder-model "$MODEL" --coder-format tables --coder-max-feedback 2 \
    --structured-output \
    --roles-temperature 0 --roles-max-tokens "$ROLES_MAX_TOKENS" \
    --roles-context-tokens 12288 --roles-timeout-secs 3600 \
    "${layout[@]}" \
    "${transfer[@]}" "${extra[@]}" \
    --out "$OUT"
save
exit "$STATUS"
