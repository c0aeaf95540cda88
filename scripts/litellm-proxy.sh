#!/usr/bin/env bash
# Install LiteLLM's proxy (`litellm[proxy]`, pinned, with the versions of its
# dependencies in scripts/litellm-proxy.constraints.txt) into its own venv,
# .ecdysis/litellm-proxy (LITELLM_VENV names another), and print the path of
# its `litellm` executable: the peer `ecdysis-host bench --proxy --litellm
# PATH` alternates with (docs/src/performance.md#the-proxy). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LITELLM_VENV:-$PWD/.ecdysis/litellm-proxy}
# The newest release whose `proxy` extra resolves from the package index
# this project installs from (later ones pin litellm-proxy,
# litellm-proxy-extras or litellm-enterprise releases it does not have).
LITELLM=1.108.7
CONSTRAINTS=scripts/litellm-proxy.constraints.txt
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('litellm') != '$LITELLM')" 2>/dev/null \
  || [ ! -x "$VENV/bin/litellm" ]; then
  python3 -m venv "$VENV"
  if [ -f "$CONSTRAINTS" ]; then
    "$VENV/bin/pip" install --quiet -c "$CONSTRAINTS" "litellm[proxy]==$LITELLM" >&2
  else
    "$VENV/bin/pip" install --quiet "litellm[proxy]==$LITELLM" >&2
  fi
fi
echo "$VENV/bin/litellm"
