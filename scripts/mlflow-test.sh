#!/usr/bin/env bash
# The MLflow tracking tests against a real `mlflow server`.
#
# CI runs the offline ones (a server that is down, a fake that fails,
# hangs and refuses); this script installs MLflow from PyPI into a venv
# (kept for the next time) and runs the test that starts a real server on
# loopback with a SQLite store. It is not in CI because of the install's
# size and time (measured in docs/src/guides/tracking.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ECDYSIS_MLFLOW_VENV:-$ROOT/.ecdysis/mlflow-venv}"
PYTHON="${PYTHON:-python3}"
MLFLOW_VERSION="3.17.2"

if [ ! -x "$VENV/bin/mlflow" ] || ! "$VENV/bin/mlflow" --version | grep -q "$MLFLOW_VERSION"; then
  echo "== installing mlflow $MLFLOW_VERSION into $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "mlflow==$MLFLOW_VERSION"
fi
"$VENV/bin/mlflow" --version >&2
cd "$ROOT"
ECDYSIS_MLFLOW="$VENV/bin/mlflow" cargo test -p ecdysis-host --test it mlflow:: -- --nocapture
cargo test -p ecdysis-track
