#!/usr/bin/env python3
"""The workspace's crate order, checked: each host crate may use (as a
normal, build or dev dependency) only the crates listed before it in the
root Cargo.toml's `members`; one listed after it fails, naming both. Crates
of one group in `[workspace.metadata.layers] siblings` (the benchmarks)
may not use each other at all, whatever their order.

    python3 scripts/check-layers.py [METADATA.json]

reads `cargo metadata --format-version 1 --no-deps` (run here unless a file
holding its output is given; `-` reads standard input) and the `members`
list of the workspace root's Cargo.toml. `.ci/run` runs it before the build.
Standard library only.
"""

import json
import pathlib
import subprocess
import sys
import tomllib

KINDS = {None: "normal", "build": "build", "dev": "dev"}


def metadata(arg):
    if arg is None:
        out = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return json.loads(out)
    if arg == "-":
        return json.load(sys.stdin)
    return json.loads(pathlib.Path(arg).read_text())


def violations(meta):
    """The edges that point to a crate listed later, as messages; and the
    crate order."""
    root = pathlib.Path(meta["workspace_root"])
    workspace = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]
    members = workspace["members"]
    groups = workspace.get("metadata", {}).get("layers", {}).get("siblings", [])
    group_of = {member: i for i, group in enumerate(groups) for member in group}
    position = {}
    for package in meta["packages"]:
        directory = pathlib.Path(package["manifest_path"]).parent
        try:
            member = directory.relative_to(root).as_posix()
        except ValueError:
            continue
        if member in members:
            position[package["name"]] = members.index(member)
    missing = [m for m in members if m not in {members[i] for i in position.values()}]
    if missing:
        raise SystemExit(f"check-layers: no package in the metadata for members {missing}")
    found = []
    for package in meta["packages"]:
        name = package["name"]
        if name not in position:
            continue
        for dep in package["dependencies"]:
            target = dep["name"]
            if target not in position:
                continue
            kind = KINDS.get(dep.get("kind"), dep.get("kind"))
            edge = (
                f"{name} ({members[position[name]]}) has a {kind} dependency on "
                f"{target} ({members[position[target]]})"
            )
            if position[target] > position[name]:
                found.append(f"{edge}, listed after it in Cargo.toml's workspace members")
            else:
                group = group_of.get(members[position[name]])
                if group is not None and group == group_of.get(members[position[target]]):
                    found.append(
                        f"{edge}, a sibling in [workspace.metadata.layers] siblings: "
                        "siblings know nothing of each other"
                    )
    order = [n for n, _ in sorted(position.items(), key=lambda item: item[1])]
    return found, order


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    found, order = violations(metadata(argv[1] if len(argv) == 2 else None))
    for message in found:
        print(f"check-layers: {message}", file=sys.stderr)
    if found:
        print(
            "check-layers: each crate uses only crates listed before it "
            f"({', '.join(order)}); CONTRIBUTING.md, 'CI'",
            file=sys.stderr,
        )
        return 1
    print(f"check-layers: {len(order)} crates, each using only crates listed before it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
