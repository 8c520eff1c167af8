#!/usr/bin/env python3
"""The import graph of the workspace must stay layered and acyclic.

Two checks, both over what `cargo metadata` lists (so a new crate is checked
as soon as it is a workspace member):

1. Crates: every workspace member is in a layer of scripts/layers.txt, and no
   dependency goes from a crate to a crate of a higher layer (a library
   crate may name a `tools:` crate as a dev-dependency only).
2. Modules: inside each library crate, the references of one top-level
   module to another (`use crate::x`, `crate::x::f()`, `super::x` from a
   top-level module, and root re-exports such as `crate::Error` counted as
   the module that defines them) form no cycle. Each cycle is printed with
   one reference per edge (file:line), so it can be cut where it is cheapest.

Usage: scripts/import-graph.py [--modules-only | --crates-only]
Exit status 1 when a check fails, 2 when the layer file is wrong.
"""

import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workspace import LAYERS, ROOT, library_crates, metadata, read_layers  # noqa: E402


def check_crates(meta, layer_of, tools):
    errors = []
    members = {p["name"] for p in meta["packages"]}
    for p in sorted(meta["packages"], key=lambda p: p["name"]):
        name = p["name"]
        if name not in layer_of:
            errors.append(
                f"{name}: a workspace member in no layer of scripts/layers.txt "
                f"(add it to the layer it belongs to, or to `tools:` if it is not published)"
            )
            continue
        for d in p["dependencies"]:
            dep, kind = d["name"], d.get("kind") or "normal"
            if dep not in members or dep == name:
                continue
            if dep not in layer_of:
                continue  # reported as a member in no layer
            if name in tools:
                continue
            if dep in tools:
                if kind != "dev":
                    errors.append(
                        f"{name} -> {dep} ({kind}): a library crate depends on a tools crate"
                    )
                continue
            if layer_of[dep] > layer_of[name]:
                errors.append(
                    f"{name} (layer {layer_of[name]}) -> {dep} (layer {layer_of[dep]}), {kind}: "
                    f"an upward dependency"
                )
    return errors


# --- modules ----------------------------------------------------------------

TOKEN = re.compile(
    r"""
      (?P<line_comment>//[^\n]*)
    | (?P<block_comment>/\*)
    | (?P<raw_string>b?r(?P<hashes>\#*)")
    | (?P<string>b?"(?:\\.|[^"\\])*")
    | (?P<char>b?'(?:\\.|[^'\\\n])')
    """,
    re.VERBOSE | re.DOTALL,
)


def strip_code(text):
    """The text with comments, strings and char literals blanked (newlines
    kept, so line numbers stay)."""
    out, i = [], 0
    blank = lambda s: re.sub(r"[^\n]", " ", s)
    while True:
        m = TOKEN.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        if m.group("block_comment"):
            depth, j = 1, m.end()
            while depth and j < len(text):
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[m.start():j]))
            i = j
        elif m.group("raw_string"):
            end = '"' + m.group("hashes")
            j = text.find(end, m.end())
            j = len(text) if j < 0 else j + len(end)
            out.append(blank(text[m.start():j]))
            i = j
        else:
            out.append(blank(m.group(0)))
            i = m.end()
    return "".join(out)


MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*[;{]", re.M)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)')


CFG_TEST = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*)\)\]\s*(?:#\[[^\]]*\]\s*)*"
                      r"(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*([;{])")


def without_tests(code):
    """The code with `#[cfg(test)] mod x { ... }` blocks blanked, and the
    names of `#[cfg(test)] mod x;` declarations (files that are tests)."""
    test_files = set()
    while True:
        m = next((m for m in CFG_TEST.finditer(code) if m.group(2) == "{"), None)
        for d in CFG_TEST.finditer(code):
            if d.group(2) == ";":
                test_files.add(d.group(1))
        if m is None:
            return code, test_files
        depth, j = 1, m.end()
        while depth and j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[:m.start()] + re.sub(r"[^\n]", " ", code[m.start():j]) + code[j:]


def top_modules(lib_rs, lib_code):
    """{module name: [files]} of the crate's top-level modules (a module's
    file and every file under its directory), test-only modules left out."""
    src = os.path.dirname(lib_rs)
    mods = {}
    lib_code, test_mods = without_tests(lib_code)
    for name in MOD_DECL.findall(lib_code):
        if name in test_mods:
            continue
        files = []
        for cand in (os.path.join(src, f"{name}.rs"), os.path.join(src, name, "mod.rs")):
            if os.path.isfile(cand):
                files.append(cand)
        sub = os.path.join(src, name)
        if os.path.isdir(sub):
            for dirpath, _, names in os.walk(sub):
                for n in sorted(names):
                    f = os.path.join(dirpath, n)
                    if n.endswith(".rs") and f not in files:
                        files.append(f)
        mods[name] = files
    return mods


def flatten_use_tree(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (no globs kept)."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(t):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(t[start:i])
                start = i + 1
        parts.append(t[start:])
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + head, rest[: rest.rfind("}")])
            else:
                out.append(prefix + p.split(" as ")[0])

    walk("", tree)
    return out


def root_reexports(lib_code, mods):
    """{name: module} for `pub use module::...::Name` at the crate root."""
    names = {}
    for m in re.finditer(r"\buse\s+([^;]+);", lib_code):
        for path in flatten_use_tree(m.group(1)):
            path = path.removeprefix("crate::").removeprefix("self::")
            parts = path.split("::")
            if len(parts) >= 2 and parts[0] in mods and parts[-1] != "*":
                names[parts[-1].split("as")[0]] = parts[0]
    return names


PATH_REF = re.compile(r"\b(crate|super)((?:\s*::\s*(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
USE_STMT = re.compile(r"\buse\s+((?:crate|super|self)\s*::[^;]+);")


def module_depth(src, f):
    """How many modules below the crate root the file's own module is:
    src/x.rs and src/x/mod.rs are 1, src/x/y.rs is 2."""
    rel = os.path.relpath(f, src).split(os.sep)
    depth = len(rel)
    if rel[-1] == "mod.rs":
        depth -= 1
    return depth


def resolve(path_segments, depth):
    """The top-level module a path from a file at `depth` names, or None for
    the root itself. `path_segments` starts with `crate` or `super`."""
    segs = list(path_segments)
    if segs[0] == "crate":
        rest = segs[1:]
    else:
        level = depth
        while segs and segs[0] == "super":
            level -= 1
            segs = segs[1:]
        if level != 0:
            return "self"  # inside the same top-level module
        rest = segs
    return rest[0] if rest else None


def module_edges(lib_rs):
    """{(from, to): [file:line, ...]} between the crate's top-level modules."""
    src = os.path.dirname(lib_rs)
    with open(lib_rs, encoding="utf-8") as f:
        lib_code = strip_code(f.read())
    mods = top_modules(lib_rs, lib_code)
    reexports = root_reexports(lib_code, mods)
    edges = defaultdict(list)
    skipped = set()  # files of test-only modules (`#[cfg(test)] mod x;`)
    for mod, files in mods.items():
        for f in files:
            with open(f, encoding="utf-8") as fh:
                code, test_files = without_tests(strip_code(fh.read()))
            if f in skipped:
                continue
            here = os.path.dirname(f) if f.endswith("mod.rs") else f[:-3]
            for t in test_files:
                skipped.add(os.path.join(here, f"{t}.rs"))
                skipped.add(os.path.join(here, t, "mod.rs"))
            depth = module_depth(src, f)
            refs = []
            for m in USE_STMT.finditer(code):
                for p in flatten_use_tree(m.group(1)):
                    refs.append((m.start(), [s for s in p.split("::") if s]))
            for m in PATH_REF.finditer(code):
                segs = [m.group(1)] + [s.strip() for s in m.group(2).split("::") if s.strip()]
                refs.append((m.start(), segs))
            for pos, segs in refs:
                if segs[0] == "self":
                    continue
                target = resolve(segs, depth)
                if target in (None, "self", mod):
                    continue
                if target not in mods:
                    target = reexports.get(target)
                    if target is None or target == mod:
                        continue
                line = code.count("\n", 0, pos) + 1
                where = f"{os.path.relpath(f, ROOT)}:{line}"
                if where not in edges[(mod, target)]:
                    edges[(mod, target)].append(where)
    return mods, edges


def cycles(nodes, edges):
    """The strongly connected components with more than one module."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def one_cycle(comp, edges):
    """A shortest cycle through the component's first module."""
    comp = set(comp)
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for a in frontier:
            for (x, b) in edges:
                if x != a or b not in comp:
                    continue
                if b == start:
                    path = [a]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if b not in prev:
                    prev[b] = a
                    nxt.append(b)
        frontier = nxt
    return [start]


def check_modules(meta, tools):
    failed = False
    for name, lib_rs in sorted(library_crates(meta, tools)):
        mods, edges = module_edges(lib_rs)
        for comp in cycles(mods, edges):
            failed = True
            path = one_cycle(comp, edges)
            print(f"{name}: modules in a cycle: {', '.join(comp)}")
            print(f"  e.g. {' -> '.join(path)}:")
            for a, b in zip(path, path[1:]):
                refs = edges[(a, b)]
                more = f" (+{len(refs) - 1} more)" if len(refs) > 1 else ""
                print(f"    {a} -> {b}: {refs[0]}{more}")
    return failed


def main():
    args = set(sys.argv[1:])
    layer_of, tools = read_layers()
    meta = metadata()
    failed = False
    if "--modules-only" not in args:
        errors = check_crates(meta, layer_of, tools)
        for e in errors:
            print(f"import-graph: {e}")
        failed |= bool(errors)
    if "--crates-only" not in args:
        failed |= check_modules(meta, tools)
    if failed:
        print("import-graph: failed (layers: scripts/layers.txt)", file=sys.stderr)
        return 1
    print("import-graph: crates layered, modules acyclic")
    return 0


if __name__ == "__main__":
    sys.exit(main())
