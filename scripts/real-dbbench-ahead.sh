#!/usr/bin/env bash
# Runs the real experiment's untrained baselines (Direct, then the
# hand-configured one, the experiment's order) ahead of the experiment, on a second llama-server
# instance of the same 1.5B model, while the experiment itself is busy with
# a stage that leaves a core idle (the cross-model transfer, whose 0.5B
# server has one thread).
#
# How: a copy of the experiment's directory ($COPY, made once; the transfer
# directories left out) is resumed with the running experiment's own
# command, but with --transfer none and the agent's URL on the second
# server. The copy replays every recorded stage from its files and the
# response cache, then asks the second server for the baselines' episodes.
# The cache is keyed on the request, not on the server's address, so when
# the experiment reaches its baselines it finds those replies in the cache:
# the copy's directory itself is never read by the experiment.
#
# Stop it (kill the copy's process, or let the session end) before the
# experiment reaches its baselines, unless the copy is done: both would
# otherwise compute the same replies, on three server threads over two
# cores. Run it again to go on; the copy resumes like any run.
#
#   ECDYSIS_HOST=<the experiment's binary> scripts/real-dbbench-ahead.sh
#
# Environment:
#   OUT         the experiment's directory (runs/real-dbbench-2); its
#               `experiment` process must be running (its command is read
#               from it)
#   COPY        the copy's directory ($OUT.ahead)
#   PORT_AHEAD  the second server's port (8082); 1 thread, the experiment's
#               context and slots
set -euo pipefail
NAME=real-dbbench-ahead
PORT="${PORT_AHEAD:-8082}"
CTX="${CTX:-24576}"
THREADS=1
PARALLEL="${PARALLEL:-2}"
source "$(dirname "${BASH_SOURCE[0]}")/lib-real.sh"
OUT="${OUT:-runs/real-dbbench-2}"
COPY="${COPY:-$OUT.ahead}"
: "${ECDYSIS_HOST:?set ECDYSIS_HOST to the binary the experiment runs}"

pid="$(pgrep -f -- "experiment .*--out $OUT\$" | head -n 1 || true)"
[[ -n "$pid" ]] || { say "no experiment process with --out $OUT is running: start it first (scripts/real-dbbench.sh)"; exit 1; }
mapfile -t args < <(tr '\0' '\n' < "/proc/$pid/cmdline" | tail -n +3)
[[ "$(tr '\0' '\n' < "/proc/$pid/cmdline" | sed -n 2p)" == experiment ]] || { say "process $pid is not an experiment"; exit 1; }

# The second server: its own state directory (pid and log files), the
# same build and weights.
LLM_DIR="${ECDYSIS_LLM_DIR:-$ROOT/.ecdysis/llm}"
mkdir -p "$LLM_DIR/ahead-server"
for d in build models src tools; do
    ln -sfn "$LLM_DIR/$d" "$LLM_DIR/ahead-server/$d"
done
ECDYSIS_LLM_DIR="$LLM_DIR/ahead-server" ensure_server

if [[ ! -d "$COPY" ]]; then
    say "copying $OUT to $COPY (without the transfer directories)"
    rm -rf "$COPY.partial"
    cp -a "$OUT" "$COPY.partial"
    rm -rf "$COPY.partial"/transfer-*
    # The copy's recorded configurations name the server its command does.
    grep -rl --include=config.json -- "127.0.0.1:[0-9]*/v1" "$COPY.partial" \
        | xargs -r sed -i "s#127\.0\.0\.1:[0-9]*/v1#127.0.0.1:$PORT/v1#g"
    mv "$COPY.partial" "$COPY"
fi

for i in "${!args[@]}"; do
    case "${args[$i]}" in
        http://127.0.0.1:*/v1) args[i]="$URL" ;;
    esac
    case "${args[$i]}" in
        --transfer) args[i + 1]=none ;;
        --out) args[i + 1]="$COPY" ;;
    esac
done
say "running the experiment's command into $COPY against $URL (log: $COPY/ahead.log)"
run_logged "$COPY/ahead.log" "$ECDYSIS_HOST" experiment "${args[@]}"
exit "$STATUS"
