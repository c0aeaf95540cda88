#!/usr/bin/env bash
# Install aider (the `aider-chat` package, pinned) into .ecdysis/aider, a
# venv of Debian's python3: the real coder CLI of the training guide's
# worked example, which host/cli/tests/it/docs_examples.rs runs jailed as
# `train --coder-command` against a scripted endpoint. scripts/test-deps.sh
# runs it; idempotent. The venv is made from /usr/bin/python3 because the
# coder's jail sees /usr and the venv, not a Python installed elsewhere.
# Its size and install time: CONTRIBUTING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.ecdysis/aider
AIDER=0.86.2
installed() {
  "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('aider-chat'))" 2>/dev/null
}
if [ ! -x "$VENV/bin/aider" ] || [ "$(installed)" != "$AIDER" ]; then
  echo "aider: installing aider-chat $AIDER into $VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "aider-chat==$AIDER"
fi
echo "aider $(installed) in $VENV"
