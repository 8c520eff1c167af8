#!/usr/bin/env python3
"""The workspace's crates as scripts/layers.txt and `cargo metadata` see
them, for scripts/import-graph.py and scripts/public-api.py."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = os.path.join(ROOT, "scripts", "layers.txt")


def read_layers():
    """{crate: layer index}, and the set of tools crates."""
    layer_of, tools = {}, set()
    with open(LAYERS, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            is_tools = line.startswith("tools:")
            if is_tools:
                line = line[len("tools:"):]
            n = len(set(layer_of.values()))
            for crate in line.split():
                if crate in layer_of:
                    sys.exit(f"import-graph: {crate} is in two layers of {LAYERS}")
                layer_of[crate] = n
                if is_tools:
                    tools.add(crate)
    return layer_of, tools


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def library_crates(meta, tools):
    """(name, src/lib.rs path) of each workspace member with a library
    target that is not a tools crate."""
    for p in meta["packages"]:
        if p["name"] in tools:
            continue
        for t in p["targets"]:
            if "lib" in t["kind"] or "proc-macro" in t["kind"]:
                yield p["name"], t["src_path"]


if __name__ == "__main__":
    # `python3 scripts/workspace.py`: the library crates, one a line
    # (name and manifest directory), for shell scripts.
    _, tools = read_layers()
    meta = metadata()
    dirs = {p["name"]: os.path.dirname(p["manifest_path"]) for p in meta["packages"]}
    for name, _ in sorted(library_crates(meta, tools)):
        print(name, os.path.relpath(dirs[name], ROOT))
