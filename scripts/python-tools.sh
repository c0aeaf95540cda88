#!/usr/bin/env bash
# Install the tools Python-authored harnesses need into .ecdysis/python-tools
# (a venv): componentize-py, which builds a harness directory into a
# component, and pytest, which runs a harness's own unit tests. The host and
# the tests find componentize-py there; elsewhere, name it in
# ECDYSIS_COMPONENTIZE_PY or put it on PATH. Also the `openai` SDK, the
# client of the proxy's SDK test (host/proxy/tests/it/main.rs), which finds
# this venv's python (or ECDYSIS_OPENAI_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.ecdysis/python-tools
OPENAI=1.109.1
if [ ! -x "$VENV/bin/componentize-py" ] || [ ! -x "$VENV/bin/pytest" ] \
  || ! "$VENV/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet componentize-py==0.25.1 pytest==9.2.0 "openai==$OPENAI"
fi
"$VENV/bin/componentize-py" --version
