# Shared by scripts/real-*.sh (sourced, not run): the local server, the
# host binary and the timestamped log of a long real-model run.
#
# The sourcing script sets NAME (its log prefix), PORT and CTX first (and
# THREADS, PARALLEL for the server when they are not 1).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="qwen2.5-coder-1.5b-instruct"
URL="http://127.0.0.1:$PORT/v1"

say() { printf '[%s %s] %s\n' "$NAME" "$(date -u +%H:%M:%S)" "$*" >&2; }

# llama-server on $PORT with context $CTX, started with scripts/local-llm.sh
# unless something already answers there; replies of up to 1024 tokens for
# the roles.
ensure_server() {
    if ! curl -fsS --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
        say "starting llama-server on port $PORT (context $CTX, ${THREADS:-1} thread(s), ${PARALLEL:-1} request(s) at once)"
        ECDYSIS_LLM_MAX_TOKENS=1024 scripts/local-llm.sh serve --ctx "$CTX" --port "$PORT" \
            --threads "${THREADS:-1}" --parallel "${PARALLEL:-1}" >/dev/null
    fi
    say "server context: $(curl -fsS "http://127.0.0.1:$PORT/props" | python3 -c 'import json,sys; print(json.load(sys.stdin)["default_generation_settings"]["n_ctx"])') tokens"
}

# HOST: $ECDYSIS_HOST, else a release build of this checkout.
ensure_host() {
    HOST="${ECDYSIS_HOST:-}"
    if [[ -z "$HOST" ]]; then
        say "building the host (release)"
        cargo build --release -q -p ecdysis-host
        HOST="$ROOT/target/release/ecdysis-host"
    fi
}

# run_logged LOG COMMAND...: runs COMMAND with every output line stamped
# with the time and appended to LOG (and shown); sets STATUS to its exit
# status without stopping the script, so the caller still copies the files.
run_logged() {
    local log="$1"
    shift
    local started=$SECONDS
    set +e
    "$@" 2>&1 | while IFS= read -r line; do
        printf '%s %s\n' "$(date -u +%H:%M:%S)" "$line"
    done | tee -a "$log"
    STATUS=${PIPESTATUS[0]}
    set -e
    say "$(basename "$1") exited with $STATUS after $((SECONDS - started)) s"
}

# copy_if SRC DEST: copies SRC when it exists.
copy_if() {
    if [[ -f "$1" ]]; then cp "$1" "$2"; fi
}
