#!/usr/bin/env python3
"""How much of each recorded request's prompt the server served from its
prefix cache, from a response cache directory (.ecdysis/cache, or a
results snapshot unpacked): per model, the first request of a conversation
(one user message, no assistant turn yet) apart from the later steps, whose
prompts extend an earlier request of the same conversation.

The share is what the server reported (`usage.prompt_tokens_details.
cached_tokens`, kept as `cached_prompt_tokens`) when the request was first
answered; a reply served from the response cache again is not counted twice
(each entry is one request).

    scripts/cached-prefix.py .ecdysis/cache [--model NAME] [--by-system] [--json]
"""
import argparse
import json
import os
import sys
from collections import defaultdict


def entries(root):
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".json"):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path) as f:
                    yield path, json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                print(f"skipped {path}: {e}", file=sys.stderr)


def step_kind(messages):
    """'first' for a conversation's opening request, else 'later'."""
    assistant = sum(1 for m in messages if m.get("role") == "assistant")
    return "first" if assistant == 0 else "later"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="a response cache directory")
    ap.add_argument("--model", help="only this model's requests")
    ap.add_argument("--by-system", action="store_true",
                    help="split each model's rows by the first line of the system prompt "
                         "(the agent's from the roles' and the coder's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir(args.cache):
        sys.exit(f"error: {args.cache} is not a directory")
    rows = defaultdict(lambda: {"requests": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0})
    for path, e in entries(args.cache):
        request = e.get("request", {}).get("fingerprint", {})
        usage = (e.get("response") or {}).get("usage") or {}
        model = request.get("model", "?")
        if args.model and model != args.model:
            continue
        if args.by_system:
            system = next((m.get("content") or "" for m in request.get("messages", [])
                           if m.get("role") == "system"), "")
            first_line = (system.strip().splitlines() or [""])[0][:40]
            model = f"{model} | {first_line}"
        if "prompt_tokens" not in usage:
            continue
        kind = step_kind(request.get("messages", []))
        for key in [(model, kind), (model, "all")]:
            r = rows[key]
            r["requests"] += 1
            r["prompt_tokens"] += usage.get("prompt_tokens", 0)
            r["cached_prompt_tokens"] += usage.get("cached_prompt_tokens", 0)
    if not rows:
        sys.exit(f"error: no request with usage in {args.cache}")
    out = [
        {"model": m, "steps": k, **r,
         "cached_share": r["cached_prompt_tokens"] / r["prompt_tokens"] if r["prompt_tokens"] else 0.0}
        for (m, k), r in sorted(rows.items())
    ]
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'model':70} {'steps':6} {'requests':>8} {'prompt tokens':>14} {'cached':>12} {'share':>7}")
    for r in out:
        print(f"{r['model']:70} {r['steps']:6} {r['requests']:>8} {r['prompt_tokens']:>14,} "
              f"{r['cached_prompt_tokens']:>12,} {100 * r['cached_share']:>6.1f}%")


if __name__ == "__main__":
    main()
