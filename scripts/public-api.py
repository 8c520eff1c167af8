#!/usr/bin/env python3
"""The public API of each library crate, listed and checked.

For every library crate of the workspace (a member with a library target
that scripts/layers.txt does not put under `tools:`), builds its rustdoc JSON
with every feature on (`cargo rustdoc --lib --all-features`, through
RUSTC_BOOTSTRAP=1 on the stable toolchain), walks it from the crate root the
way a user's `use` does (public modules, re-exports, the items' fields,
variants, methods and trait impls) and renders one line per item, sorted:

    pub fn cni_types::config::NetworkConfig::from_slice(bytes: &[u8]) -> Result<Self, cni_types::error::Error>

Usage:
    scripts/public-api.py [CRATE...]           compare with <crate dir>/public-api.txt,
                                               print a diff and fail on any change
    scripts/public-api.py --bless [CRATE...]   write the listings

A change of the public surface is then a visible diff in review: bless it
when it is meant. Types from other crates are named by their last path
segment (`Result`, `IpNetwork`), so a dependency moving its items around
does not change the listing; ours are named by their full path. Blanket
impls (`impl<T> From<T> for T` and the like) are left out; auto traits
(`Send`, `Sync`, ...) are listed, since losing one breaks users.
"""

import difflib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workspace import ROOT, library_crates, metadata, read_layers  # noqa: E402

TARGET_DIR = os.path.join(ROOT, "target")


class Renderer:
    def __init__(self, doc):
        self.doc = doc
        self.index = doc["index"]
        self.paths = doc["paths"]

    # --- types ---------------------------------------------------------------

    def path_name(self, p):
        """A resolved path (`{"path", "id", "args"}`) as text."""
        ident = str(p.get("id"))
        entry = self.paths.get(ident)
        if entry and entry["crate_id"] == 0:
            name = "::".join(entry["path"])
        elif entry:
            name = entry["path"][-1]
        else:
            name = p["path"].split("::")[-1]
        return name + self.generic_args(p.get("args"))

    def generic_args(self, args):
        if not args:
            return ""
        if "angle_bracketed" in args:
            ab = args["angle_bracketed"]
            parts = [self.generic_arg(a) for a in ab.get("args") or []]
            for c in ab.get("constraints") or []:
                name = c["name"] + self.generic_args(c.get("args"))
                b = c["binding"]
                if "equality" in b:
                    parts.append(f"{name} = {self.term(b['equality'])}")
                else:
                    parts.append(f"{name}: {self.bounds(b['constraint'])}")
            return f"<{', '.join(parts)}>" if parts else ""
        if "parenthesized" in args:
            pa = args["parenthesized"]
            out = f"({', '.join(self.ty(t) for t in pa['inputs'])})"
            if pa.get("output"):
                out += f" -> {self.ty(pa['output'])}"
            return out
        return ""

    def generic_arg(self, a):
        if a == "infer":
            return "_"
        if "lifetime" in a:
            return a["lifetime"]
        if "type" in a:
            return self.ty(a["type"])
        if "const" in a:
            return a["const"].get("expr") or "_"
        return "?"

    def term(self, t):
        if "type" in t:
            return self.ty(t["type"])
        return t["constant"].get("expr") or "_"

    def bounds(self, bounds):
        out = []
        for b in bounds:
            if "trait_bound" in b:
                tb = b["trait_bound"]
                modifier = {"maybe": "?", "maybe_const": "~const "}.get(tb.get("modifier"), "")
                hrtb = self.hrtb(tb.get("generic_params"))
                out.append(f"{hrtb}{modifier}{self.path_name(tb['trait'])}")
            elif "outlives" in b:
                out.append(b["outlives"])
            elif "use" in b:
                out.append(f"use<{', '.join(str(x) for x in b['use'])}>")
        return " + ".join(out)

    def hrtb(self, params):
        if not params:
            return ""
        return f"for<{', '.join(p['name'] for p in params)}> "

    def ty(self, t):
        if t is None:
            return "()"
        if "resolved_path" in t:
            return self.path_name(t["resolved_path"])
        if "dyn_trait" in t:
            d = t["dyn_trait"]
            parts = [
                self.hrtb(x.get("generic_params")) + self.path_name(x["trait"])
                for x in d["traits"]
            ]
            if d.get("lifetime"):
                parts.append(d["lifetime"])
            return "dyn " + " + ".join(parts)
        if "generic" in t:
            return t["generic"]
        if "primitive" in t:
            return t["primitive"]
        if "function_pointer" in t:
            fp = t["function_pointer"]
            sig = fp["sig"]
            ins = ", ".join(self.ty(x[1]) for x in sig["inputs"])
            out = f" -> {self.ty(sig['output'])}" if sig.get("output") else ""
            return f"{self.hrtb(fp.get('generic_params'))}fn({ins}){out}"
        if "tuple" in t:
            items = [self.ty(x) for x in t["tuple"]]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if "slice" in t:
            return f"[{self.ty(t['slice'])}]"
        if "array" in t:
            return f"[{self.ty(t['array']['type'])}; {t['array']['len']}]"
        if "pat" in t:
            return self.ty(t["pat"]["type"])
        if "impl_trait" in t:
            return "impl " + self.bounds(t["impl_trait"])
        if t == "infer" or "infer" in t:
            return "_"
        if "raw_pointer" in t:
            rp = t["raw_pointer"]
            return f"*{'mut' if rp['is_mutable'] else 'const'} {self.ty(rp['type'])}"
        if "borrowed_ref" in t:
            br = t["borrowed_ref"]
            lt = f"{br['lifetime']} " if br.get("lifetime") else ""
            return f"&{lt}{'mut ' if br['is_mutable'] else ''}{self.ty(br['type'])}"
        if "qualified_path" in t:
            q = t["qualified_path"]
            if q.get("trait"):
                return f"<{self.ty(q['self_type'])} as {self.path_name(q['trait'])}>::{q['name']}"
            return f"{self.ty(q['self_type'])}::{q['name']}"
        return json.dumps(t)

    def generics(self, g):
        """(`<T: Bound>`, ` where ...`) of a generics object."""
        if not g:
            return "", ""
        params = []
        for p in g.get("params") or []:
            kind = p["kind"]
            if "lifetime" in kind:
                outl = kind["lifetime"].get("outlives") or []
                params.append(p["name"] + (f": {' + '.join(outl)}" if outl else ""))
            elif "type" in kind:
                if kind["type"].get("is_synthetic"):
                    continue
                b = self.bounds(kind["type"].get("bounds") or [])
                d = kind["type"].get("default")
                params.append(p["name"] + (f": {b}" if b else "") + (f" = {self.ty(d)}" if d else ""))
            elif "const" in kind:
                params.append(f"const {p['name']}: {self.ty(kind['const']['type'])}")
        preds = []
        for w in g.get("where_predicates") or []:
            if "bound_predicate" in w:
                bp = w["bound_predicate"]
                preds.append(
                    f"{self.hrtb(bp.get('generic_params'))}{self.ty(bp['type'])}: {self.bounds(bp['bounds'])}"
                )
            elif "lifetime_predicate" in w:
                lp = w["lifetime_predicate"]
                preds.append(f"{lp['lifetime']}: {' + '.join(lp['outlives'])}")
            elif "eq_predicate" in w:
                ep = w["eq_predicate"]
                preds.append(f"{self.ty(ep['lhs'])} = {self.term(ep['rhs'])}")
        return (f"<{', '.join(params)}>" if params else ""), (
            f" where {', '.join(preds)}" if preds else ""
        )

    def fn_sig(self, name, f):
        h = f["header"]
        quals = ""
        if h.get("is_const"):
            quals += "const "
        if h.get("is_async"):
            quals += "async "
        if h.get("is_unsafe"):
            quals += "unsafe "
        abi = h.get("abi")
        if abi and abi != "Rust":
            quals += f'extern "{abi if isinstance(abi, str) else list(abi)[0]}" '
        params, where = self.generics(f.get("generics"))
        args = []
        for arg_name, t in f["sig"]["inputs"]:
            if arg_name == "self":
                if t.get("generic") == "Self":
                    args.append("self")
                    continue
                br = t.get("borrowed_ref")
                if br and br["type"].get("generic") == "Self":
                    lt = f"{br['lifetime']} " if br.get("lifetime") else ""
                    args.append(f"&{lt}{'mut ' if br['is_mutable'] else ''}self")
                    continue
            args.append(f"{arg_name}: {self.ty(t)}")
        out = f" -> {self.ty(f['sig']['output'])}" if f["sig"].get("output") else ""
        return f"{quals}fn {name}{params}({', '.join(args)}){out}{where}"

    # --- the walk ------------------------------------------------------------

    def listing(self):
        self.lines = set()
        self.seen = set()
        root = self.doc["root"]
        self.walk(root, [self.index[str(root)]["name"]])
        return sorted(self.lines)

    def public(self, item):
        return item.get("visibility") in ("public", "default")

    def walk(self, ident, path):
        item = self.index.get(str(ident))
        if item is None:
            return
        key = (ident, tuple(path))
        if key in self.seen:
            return
        self.seen.add(key)
        kind, inner = next(iter(item["inner"].items()))
        p = "::".join(path)
        if kind == "module":
            if len(path) > 1:
                self.lines.add(f"pub mod {p}")
            for child in inner["items"]:
                c = self.index.get(str(child))
                if c is None or not self.public(c):
                    continue
                if "use" in c["inner"]:
                    self.reexport(c, path)
                else:
                    self.walk(child, path + [c["name"]])
        elif kind == "struct":
            params, where = self.generics(inner.get("generics"))
            sk = inner["kind"]
            if sk == "unit":
                self.lines.add(f"pub struct {p}{params}{where};")
            elif "tuple" in sk:
                fields = [
                    self.ty(self.index[str(f)]["inner"]["struct_field"]) if f is not None else "_"
                    for f in sk["tuple"]
                ]
                self.lines.add(f"pub struct {p}{params}({', '.join(fields)}){where}")
            else:
                self.lines.add(f"pub struct {p}{params}{where}")
                self.fields(sk["plain"]["fields"], p)
            self.impls(inner.get("impls") or [], p)
        elif kind == "union":
            params, where = self.generics(inner.get("generics"))
            self.lines.add(f"pub union {p}{params}{where}")
            self.fields(inner.get("fields") or [], p)
            self.impls(inner.get("impls") or [], p)
        elif kind == "enum":
            params, where = self.generics(inner.get("generics"))
            attrs = " ".join(a for a in map(str, item.get("attrs") or []) if "non_exhaustive" in a)
            self.lines.add(f"{'#[non_exhaustive] ' if attrs else ''}pub enum {p}{params}{where}")
            for v in inner["variants"]:
                self.variant(v, p)
            self.impls(inner.get("impls") or [], p)
        elif kind == "function":
            self.lines.add(f"pub {self.fn_sig(p, inner)}")
        elif kind == "trait":
            params, where = self.generics(inner.get("generics"))
            b = self.bounds(inner.get("bounds") or [])
            unsafe = "unsafe " if inner.get("is_unsafe") else ""
            self.lines.add(f"pub {unsafe}trait {p}{params}{': ' + b if b else ''}{where}")
            for i in inner["items"]:
                self.assoc(i, p, in_trait=True)
        elif kind == "type_alias":
            params, where = self.generics(inner.get("generics"))
            self.lines.add(f"pub type {p}{params}{where} = {self.ty(inner['type'])}")
        elif kind == "constant":
            self.lines.add(f"pub const {p}: {self.ty(inner['type'])}")
        elif kind == "static":
            mut = "mut " if inner.get("is_mutable") else ""
            self.lines.add(f"pub static {mut}{p}: {self.ty(inner['type'])}")
        elif kind == "macro":
            self.lines.add(f"macro {p}!")
        elif kind == "proc_macro":
            self.lines.add(f"proc macro {p}")
        else:
            self.lines.add(f"pub {kind} {p}")

    def reexport(self, c, path):
        u = c["inner"]["use"]
        target = self.index.get(str(u.get("id")))
        if u.get("is_glob"):
            if target is not None and "module" in target["inner"]:
                # `pub use m::*`: m's public items appear here.
                for child in target["inner"]["module"]["items"]:
                    cc = self.index.get(str(child))
                    if cc is not None and self.public(cc) and "use" not in cc["inner"]:
                        self.walk(child, path + [cc["name"]])
            else:
                self.lines.add(f"pub use {'::'.join(path)}::* = {u['source']}::*")
            return
        if target is not None and target.get("crate_id") == 0:
            self.walk(u["id"], path + [u["name"]])
        else:
            # An item of another crate, re-exported as part of ours.
            entry = self.paths.get(str(u.get("id")))
            source = "::".join(entry["path"]) if entry else u["source"]
            self.lines.add(f"pub use {'::'.join(path + [u['name']])} = {source}")

    def fields(self, ids, p):
        for f in ids:
            fi = self.index.get(str(f))
            if fi is not None and self.public(fi):
                self.lines.add(f"pub {p}::{fi['name']}: {self.ty(fi['inner']['struct_field'])}")

    def variant(self, v, p):
        vi = self.index[str(v)]
        vk = vi["inner"]["variant"]["kind"]
        vp = f"{p}::{vi['name']}"
        if vk == "plain":
            self.lines.add(f"pub {vp}")
        elif "tuple" in vk:
            fields = [
                self.ty(self.index[str(f)]["inner"]["struct_field"]) if f is not None else "_"
                for f in vk["tuple"]
            ]
            self.lines.add(f"pub {vp}({', '.join(fields)})")
        else:
            self.lines.add(f"pub {vp} {{ .. }}")
            self.fields(vk["struct"]["fields"], vp)

    def impls(self, ids, p):
        for i in ids:
            ii = self.index.get(str(i))
            if ii is None:
                continue
            imp = ii["inner"]["impl"]
            if imp.get("blanket_impl") is not None:
                continue
            params, where = self.generics(imp.get("generics"))
            if imp.get("trait") is None:
                for a in imp["items"]:
                    ai = self.index.get(str(a))
                    if ai is not None and self.public(ai):
                        self.assoc(a, p, in_trait=False)
                continue
            neg = "!" if imp.get("is_negative") else ""
            unsafe = "unsafe " if imp.get("is_unsafe") else ""
            self.lines.add(
                f"{unsafe}impl{params} {neg}{self.path_name(imp['trait'])} for {self.ty(imp['for'])}{where}"
            )

    def assoc(self, a, p, in_trait):
        ai = self.index.get(str(a))
        if ai is None:
            return
        kind, inner = next(iter(ai["inner"].items()))
        name = f"{p}::{ai['name']}"
        vis = "" if in_trait else "pub "
        if kind == "function":
            self.lines.add(f"{vis}{self.fn_sig(name, inner)}")
        elif kind == "assoc_const":
            self.lines.add(f"{vis}const {name}: {self.ty(inner['type'])}")
        elif kind == "assoc_type":
            b = self.bounds(inner.get("bounds") or [])
            d = f" = {self.ty(inner['type'])}" if inner.get("type") else ""
            self.lines.add(f"{vis}type {name}{': ' + b if b else ''}{d}")


def rustdoc_json(crate):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1", RUSTDOCFLAGS="")
    subprocess.run(
        ["cargo", "rustdoc", "--quiet", "--locked", "-p", crate, "--lib", "--all-features",
         "--target-dir", TARGET_DIR, "--", "-Z", "unstable-options", "--output-format", "json"],
        cwd=ROOT, env=env, check=True,
    )
    with open(os.path.join(TARGET_DIR, "doc", crate.replace("-", "_") + ".json"), encoding="utf-8") as f:
        return json.load(f)


def main():
    args = sys.argv[1:]
    bless = "--bless" in args
    wanted = [a for a in args if not a.startswith("--")]
    _, tools = read_layers()
    meta = metadata()
    dirs = {p["name"]: os.path.dirname(p["manifest_path"]) for p in meta["packages"]}
    crates = sorted(name for name, _ in library_crates(meta, tools))
    unknown = [c for c in wanted if c not in crates]
    if unknown:
        sys.exit(f"public-api: not a library crate of the workspace: {', '.join(unknown)}")
    failed = []
    for crate in wanted or crates:
        listing = Renderer(rustdoc_json(crate)).listing()
        text = "".join(line + "\n" for line in listing)
        file = os.path.join(dirs[crate], "public-api.txt")
        rel = os.path.relpath(file, ROOT)
        if bless:
            with open(file, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"public-api: {rel}: {len(listing)} items")
            continue
        try:
            with open(file, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        if old != text:
            failed.append(rel)
            sys.stdout.writelines(
                difflib.unified_diff(
                    old.splitlines(True), text.splitlines(True), f"{rel} (checked in)", f"{rel} (the code)"
                )
            )
    if failed:
        print(
            f"public-api: the public API changed in {', '.join(failed)}; if that is meant, "
            f"run scripts/public-api.py --bless and commit the listings",
            file=sys.stderr,
        )
        return 1
    if not bless:
        print(f"public-api: {len(wanted or crates)} listings match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
