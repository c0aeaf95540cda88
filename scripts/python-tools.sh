#!/usr/bin/env bash
# Install the tools Python-authored harnesses need into .ecdysis/python-tools
# (a venv): componentize-py, which builds a harness directory into a
# component, and pytest, which runs a harness's own unit tests. The host and
# the tests find componentize-py there; elsewhere, name it in
# ECDYSIS_COMPONENTIZE_PY or put it on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.ecdysis/python-tools
if [ ! -x "$VENV/bin/componentize-py" ] || [ ! -x "$VENV/bin/pytest" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet componentize-py==0.25.1 pytest==9.2.0
fi
"$VENV/bin/componentize-py" --version
