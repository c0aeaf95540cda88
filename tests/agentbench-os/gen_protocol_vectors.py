"""Writes protocol_vectors.json: the texts an OS-interaction agent reads,
taken from AgentBench's own source at the commit our data comes from, for
the Rust side to compare its constants with
(host/agentbench-os/src/tests.rs).

    python3 tests/agentbench-os/gen_protocol_vectors.py <AgentBench checkout or bare git dir>

Reads `src/server/tasks/os_interaction/task.py` and
`configs/tasks/os.yaml` at commit 578c5e9 (with `git show`, so a bare
mirror works) and extracts the strings by pattern; nothing of AgentBench
is copied into this repository but these data strings.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

COMMIT = "578c5e9f706fc2dd96188ca6c8cf9095ca0c6528"


def show(repo: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, "show", f"{COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def literal(body: str) -> str:
    """The value of a Python string literal's body (escapes decoded)."""
    return ast.literal_eval(f'"""{body}"""')


def one(pattern: str, text: str, what: str) -> str:
    found = re.findall(pattern, text, re.S)
    if len(set(found)) != 1:
        sys.exit(f"{what}: expected one match of {pattern!r}, found {found!r}")
    return found[0]


def main() -> None:
    repo = sys.argv[1]
    task = show(repo, "src/server/tasks/os_interaction/task.py")
    config = yaml.safe_load(show(repo, "configs/tasks/os.yaml"))
    params = config["default"]["parameters"]
    limit = int(one(r"if len\(result_text\) > (\d+):", task, "cut limit"))
    keep = int(one(r"result_text\[:(\d+)\] \+", task, "kept characters"))
    suffix = one(r'result_text\[:\d+\] \+ "([^"]*)"', task, "cut suffix")
    vectors = {
        "commit": COMMIT,
        "system_prompt": literal(one(r'system_message = """(.*?)"""', task, "system prompt")),
        "task_prefix": literal(one(r"content=f'(Now, I will start[^{]*)\{description\}'", task, "task prefix")),
        "no_call_reply": literal(one(r'content="(No executable tool calls[^"]*)"', task, "no-call reply")),
        "invalid_function": literal(one(r'content="(Invalid function call[^"]*)"', task, "invalid function")),
        "output_prefix": literal(one(r"content=f'([^{']*)\{result_text\}'", task, "output prefix")),
        "empty_output": literal(one(r'else "(The output of the OS is empty\.)"', task, "empty output")),
        "cut_limit": limit,
        "cut_keep": keep,
        "cut_suffix": literal(suffix),
        "round_limit": params["round_limit"],
        "tools": params["tools"],
    }
    out = Path(__file__).with_name("protocol_vectors.json")
    out.write_text(json.dumps(vectors, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
