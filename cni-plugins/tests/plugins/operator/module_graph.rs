//! No module cycles (issue 32): at every nesting level of the library crates
//! (the top-level modules of each crate, the children of `cni-multus`'s
//! `thick`, of `cni-firewall`'s `nfconn`, ...), the modules that use
//! one another form no cycle. A module uses a sibling when a path in it
//! (`crate::`, `super::`, `self::`, or a `use` of a child module) names an
//! item of the sibling's subtree, followed through the `use` re-exports of
//! the modules on the way (`crate::Name` re-exported by `lib.rs` is the
//! module that defines `Name`). `#[cfg(test)]` items and comments are not
//! read; `bin/` targets are crates of their own.
//!
//! The reader is a small tokenizer, not a Rust parser: it knows the module
//! tree (`mod a;` files and inline `mod a { .. }` blocks), `use` trees and
//! item definitions, which is what the paths need.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::workspace;

/// The library crates whose module graphs are checked.
const CRATES: &[&str] = &[
    "cni-types",
    "cni-exec/files",
    "cni-exec",
    "cni-exec/cri",
    "cni-netns",
    "cni-netns/firewall",
    "cni-ipam",
    "cni-plugins/gc",
    "cni-plugins",
    "cni-plugins/multus",
];

type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Punct(char),
    /// `::`
    PathSep,
    /// A string, char or number literal, or a lifetime.
    Lit,
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// The tokens of a source file, comments dropped.
fn tokens(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let is_id = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(&c, i);
            out.push(Tok::Lit);
        } else if ch == '\'' {
            if next == Some('\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(Tok::Lit);
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push(Tok::Lit);
            } else {
                i += 1;
                while i < c.len() && is_id(c[i]) {
                    i += 1;
                }
                out.push(Tok::Lit);
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (is_id(c[i]) || c[i] == '.' && c.get(i + 1) != Some(&'.')) {
                i += 1;
            }
            out.push(Tok::Lit);
        } else if is_id(ch) {
            let start = i;
            while i < c.len() && is_id(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let at = c.get(i).copied();
            if matches!(word.as_str(), "b" | "c") && at == Some('\'') {
                i = skip_string_like(&c, i, '\'');
                out.push(Tok::Lit);
            } else if matches!(word.as_str(), "b" | "c") && at == Some('"') {
                i = skip_string(&c, i);
                out.push(Tok::Lit);
            } else if matches!(word.as_str(), "r" | "br" | "cr") && matches!(at, Some('"' | '#')) {
                let mut j = i;
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                if c.get(j) == Some(&'"') {
                    // a raw string: ends at `"` followed by as many `#`
                    let hashes = j - i;
                    j += 1;
                    loop {
                        if j >= c.len() {
                            break;
                        }
                        if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                            j += 1 + hashes;
                            break;
                        }
                        j += 1;
                    }
                    i = j;
                    out.push(Tok::Lit);
                } else {
                    // a raw identifier, `r#type`
                    let start = j;
                    while j < c.len() && is_id(c[j]) {
                        j += 1;
                    }
                    out.push(Tok::Ident(c[start..j].iter().collect()));
                    i = j;
                }
            } else {
                out.push(Tok::Ident(word));
            }
        } else if ch == ':' && next == Some(':') {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn skip_string(c: &[char], i: usize) -> usize {
    skip_string_like(c, i, '"')
}

/// The index after the literal opened by `c[i] == quote`.
fn skip_string_like(c: &[char], mut i: usize, quote: char) -> usize {
    i += 1;
    while i < c.len() && c[i] != quote {
        if c[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// The index of the token closing the group opened at `open`.
fn close(t: &[Tok], open: usize) -> usize {
    let mut depth = 0i32;
    for (i, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    t.len() - 1
}

/// The tokens without `#[cfg(test)]` items (and without attributes).
fn strip_tests(t: &[Tok]) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let inner = t.get(i + 1) == Some(&Tok::Punct('!'));
        let bracket = if inner { i + 2 } else { i + 1 };
        if t[i] != Tok::Punct('#') || t.get(bracket) != Some(&Tok::Punct('[')) {
            out.push(t[i].clone());
            i += 1;
            continue;
        }
        let end = close(t, bracket);
        let attr = &t[bracket + 1..end];
        let word = |k: usize| ident(attr.get(k));
        let is_test = word(0) == Some("cfg")
            && (word(2) == Some("test")
                // `any(test, feature = "x")` is also built without tests.
                || word(2) == Some("all") && word(4) == Some("test"));
        i = end + 1;
        if !is_test || inner {
            continue;
        }
        // Skip further attributes, then the item: up to its `;` or through
        // its `{ .. }` block.
        while t.get(i) == Some(&Tok::Punct('#')) {
            i = close(t, i + 1) + 1;
        }
        while i < t.len() {
            match t[i] {
                Tok::Punct(';') => {
                    i += 1;
                    break;
                }
                Tok::Punct('{') => {
                    i = close(t, i) + 1;
                    break;
                }
                Tok::Punct('(' | '[') => i = close(t, i) + 1,
                _ => i += 1,
            }
        }
    }
    out
}

#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    tokens: Vec<Tok>,
    children: BTreeSet<String>,
    /// Items defined here (functions, types, constants, macros).
    defs: BTreeSet<String>,
    /// Module-level `use`: the name bound, or `None` for a glob, and the
    /// absolute path named (crate-internal ones only).
    imports: Vec<(Option<String>, ModPath)>,
    /// Every crate-internal path named here, absolute, with its text.
    refs: Vec<(ModPath, String)>,
}

/// One crate's module tree.
struct Crate {
    name: String,
    mods: BTreeMap<ModPath, Module>,
}

impl Crate {
    fn read(name: &str) -> Crate {
        let src = workspace().join(name).join("src");
        let mut c = Crate {
            name: name.to_string(),
            mods: BTreeMap::new(),
        };
        c.load_file(Vec::new(), &src.join("lib.rs"), &src);
        c.link();
        c
    }

    /// Reads a module's file and, recursively, its children.
    fn load_file(&mut self, path: ModPath, file: &Path, dir: &Path) {
        let src = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let toks = strip_tests(&tokens(&src));
        self.load_tokens(path, file, dir, toks);
    }

    /// `dir` holds the files of this module's children.
    fn load_tokens(&mut self, path: ModPath, file: &Path, dir: &Path, toks: Vec<Tok>) {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut body = Vec::new();
        let mut i = 0;
        let mut depth = 0;
        while i < toks.len() {
            match &toks[i] {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                Tok::Ident(kw) if depth == 0 && kw == "mod" => {
                    if let Some(name) = ident(toks.get(i + 1)).map(str::to_string) {
                        let mut child = path.clone();
                        child.push(name.clone());
                        module.children.insert(name.clone());
                        if toks.get(i + 2) == Some(&Tok::Punct('{')) {
                            let end = close(&toks, i + 2);
                            let inner = toks[i + 3..end].to_vec();
                            self.load_tokens(child, file, &dir.join(&name), inner);
                            i = end + 1;
                        } else {
                            let flat = dir.join(format!("{name}.rs"));
                            let nested = dir.join(&name).join("mod.rs");
                            let f = if flat.exists() { flat } else { nested };
                            self.load_file(child, &f, &dir.join(&name));
                            i += 3;
                        }
                        continue;
                    }
                }
                Tok::Ident(kw)
                    if depth == 0
                        && matches!(
                            kw.as_str(),
                            "fn" | "struct"
                                | "enum"
                                | "trait"
                                | "type"
                                | "const"
                                | "static"
                                | "union"
                        ) =>
                {
                    if let Some(name) = ident(toks.get(i + 1)) {
                        module.defs.insert(name.to_string());
                    }
                }
                Tok::Ident(kw) if kw == "macro_rules" => {
                    if let Some(name) = ident(toks.get(i + 2)) {
                        module.defs.insert(name.to_string());
                    }
                }
                _ => {}
            }
            body.push(toks[i].clone());
            i += 1;
        }
        module.tokens = body;
        self.mods.insert(path, module);
    }

    /// Reads the `use` trees and paths of every module, once the tree is known.
    fn link(&mut self) {
        let paths: Vec<ModPath> = self.mods.keys().cloned().collect();
        for path in paths {
            let toks = std::mem::take(&mut self.mods.get_mut(&path).unwrap().tokens);
            let mut imports = Vec::new();
            let mut refs = Vec::new();
            let mut depth = 0;
            let mut i = 0;
            while i < toks.len() {
                match &toks[i] {
                    Tok::Punct('{') => depth += 1,
                    Tok::Punct('}') => depth -= 1,
                    Tok::Ident(kw) if kw == "use" => {
                        let end = (i..toks.len())
                            .find(|&k| toks[k] == Tok::Punct(';'))
                            .unwrap_or(toks.len());
                        let mut found = Vec::new();
                        use_tree(&toks[i + 1..end], &mut 0, Vec::new(), &mut found);
                        for (segs, name) in found {
                            let text = segs.join("::");
                            if let Some(abs) = self.absolute(&path, &segs) {
                                if depth == 0 {
                                    imports.push((name, abs.clone()));
                                }
                                refs.push((abs, text));
                            }
                        }
                        i = end + 1;
                        continue;
                    }
                    Tok::Ident(kw)
                        if matches!(kw.as_str(), "crate" | "super" | "self")
                            && toks.get(i + 1) == Some(&Tok::PathSep)
                            && (i == 0 || toks[i - 1] != Tok::Punct('$')) =>
                    {
                        let mut segs = vec![kw.clone()];
                        let mut k = i + 1;
                        while toks.get(k) == Some(&Tok::PathSep) {
                            match ident(toks.get(k + 1)) {
                                Some(s) => segs.push(s.to_string()),
                                None => break,
                            }
                            k += 2;
                        }
                        if let Some(abs) = self.absolute(&path, &segs) {
                            refs.push((abs, segs.join("::")));
                        }
                        i = k;
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
            let m = self.mods.get_mut(&path).unwrap();
            m.imports = imports;
            m.refs = refs;
        }
    }

    /// The absolute path of `segs` as written in module `at`; `None` for
    /// other crates' paths.
    fn absolute(&self, at: &ModPath, segs: &[String]) -> Option<ModPath> {
        let first = segs.first()?;
        let (mut base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (at.clone(), &segs[1..]),
            "super" => (at.clone(), segs),
            _ if self.mods[at].children.contains(first) => (at.clone(), segs),
            _ => return None,
        };
        let mut rest = rest;
        while rest.first().map(String::as_str) == Some("super") {
            base.pop()?;
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module that defines what `path` names (following `use`), or
    /// `None` when it is another crate's.
    fn resolve(&self, path: &[String], fuel: u32) -> Option<ModPath> {
        if fuel == 0 {
            return None;
        }
        let mut cur: ModPath = Vec::new();
        for (i, seg) in path.iter().enumerate() {
            let m = &self.mods[&cur];
            if m.children.contains(seg) {
                cur.push(seg.clone());
                continue;
            }
            if m.defs.contains(seg) {
                return Some(cur);
            }
            let rest = &path[i + 1..];
            if let Some((_, target)) = m.imports.iter().find(|(n, _)| n.as_ref() == Some(seg)) {
                let mut next = target.clone();
                next.extend(rest.iter().cloned());
                return self.resolve(&next, fuel - 1);
            }
            for (_, glob) in m.imports.iter().filter(|(n, _)| n.is_none()) {
                let Some(g) = self.resolve(glob, fuel - 1) else {
                    continue;
                };
                let gm = &self.mods[&g];
                let has = gm.children.contains(seg)
                    || gm.defs.contains(seg)
                    || gm.imports.iter().any(|(n, _)| n.as_ref() == Some(seg));
                if has && g != cur {
                    let mut next = g.clone();
                    next.extend(path[i..].iter().cloned());
                    return self.resolve(&next, fuel - 1);
                }
            }
            return Some(cur);
        }
        Some(cur)
    }

    /// Per parent module: which child uses which sibling, with one example
    /// (file and path) per edge.
    fn graphs(&self) -> BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> {
        let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> =
            BTreeMap::new();
        let root = workspace();
        for (from, m) in &self.mods {
            for (abs, text) in &m.refs {
                let Some(to) = self.resolve(abs, 32) else {
                    continue;
                };
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if from.len() > common && to.len() > common {
                    let file = m.file.strip_prefix(&root).unwrap_or(&m.file);
                    graphs
                        .entry(from[..common].to_vec())
                        .or_default()
                        .entry(from[common].clone())
                        .or_default()
                        .entry(to[common].clone())
                        .or_insert_with(|| format!("{} ({text})", file.display()));
                }
            }
        }
        graphs
    }

    /// Every cycle, described: `crate::a: x -> y -> x`, with the example
    /// of each edge.
    fn cycles(&self) -> Vec<Cycle> {
        let mut out = Vec::new();
        for (parent, edges) in self.graphs() {
            for comp in strongly_connected(&edges) {
                let cycle = cycle_in(&comp, &edges);
                let scope = if parent.is_empty() {
                    self.name.clone()
                } else {
                    format!("{}::{}", self.name, parent.join("::"))
                };
                let mut s = format!(
                    "{scope}: {} (all of {{{}}} reach one another)",
                    cycle.join(" -> "),
                    comp.join(", ")
                );
                for a in &comp {
                    for (b, example) in &edges[a] {
                        if comp.contains(b) {
                            let _ = write!(s, "\n    {a} -> {b}: {example}");
                        }
                    }
                }
                out.push(Cycle {
                    scope,
                    members: comp,
                    text: s,
                });
            }
        }
        out
    }
}

/// One strongly connected set of sibling modules.
#[derive(Debug)]
struct Cycle {
    /// `crate::parent::module` whose children these are.
    scope: String,
    /// The modules, sorted.
    members: Vec<String>,
    /// The description: a cycle through them and every edge among them.
    text: String,
}

/// Parses a `use` tree (the tokens after `use`), pushing each path with the
/// name it binds (`None` for a glob or `_`).
fn use_tree(
    t: &[Tok],
    i: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(ModPath, Option<String>)>,
) {
    if t.get(*i) == Some(&Tok::PathSep) {
        *i += 1;
    }
    loop {
        match t.get(*i) {
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((prefix, None));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while *i < t.len() && t[*i] != Tok::Punct('}') {
                    use_tree(t, i, prefix.clone(), out);
                    if t.get(*i) == Some(&Tok::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some(Tok::Ident(seg)) => {
                *i += 1;
                if t.get(*i) == Some(&Tok::PathSep) {
                    prefix.push(seg.clone());
                    *i += 1;
                    continue;
                }
                let bound = if seg == "self" {
                    prefix.last().cloned()
                } else {
                    prefix.push(seg.clone());
                    Some(seg.clone())
                };
                let name = if ident(t.get(*i)) == Some("as") {
                    *i += 2;
                    ident(t.get(*i - 1))
                        .filter(|n| *n != "_")
                        .map(str::to_string)
                } else {
                    bound
                };
                out.push((prefix, name));
                return;
            }
            _ => return,
        }
    }
}

/// The strongly connected components of more than one node (Tarjan).
fn strongly_connected(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        let succ: Vec<&'a str> = s
            .edges
            .get(v)
            .map(|e| e.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for w in succ {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// A cycle through the first node of a strongly connected component
/// (breadth-first, so the shortest), first node repeated at the end.
fn cycle_in(comp: &[String], edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    let start = &comp[0];
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in edges.get(v).into_iter().flat_map(|e| e.keys()) {
            if !comp.contains(w) {
                continue;
            }
            if w == start {
                let mut path = vec![start.clone()];
                let mut at = v;
                while at != start {
                    path.push(at.clone());
                    at = prev[at];
                }
                path.push(start.clone());
                path.reverse();
                return path;
            }
            if !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    comp.to_vec()
}

#[test]
fn module_graphs_have_no_cycles() {
    let cycles: Vec<Cycle> = CRATES
        .iter()
        .flat_map(|name| Crate::read(name).cycles())
        .collect();
    let found: Vec<&str> = cycles.iter().map(|c| c.text.as_str()).collect();
    assert!(
        found.is_empty(),
        "module cycles (move the shared items to the module they belong to, or \
         to a new lower one):\n{}",
        found.join("\n")
    );
}

/// The reader sees a cycle that goes through a `lib.rs` re-export and a
/// nested module, and ignores `#[cfg(test)]` code and comments.
#[test]
fn module_graph_reader_sees_cycles_through_re_exports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("demo").join("src");
    std::fs::create_dir_all(src.join("outer")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(src.join(p), s).unwrap();
    write(
        "lib.rs",
        "mod a;\nmod b;\npub mod outer;\npub use b::Thing;\n#[cfg(test)]\nmod tests;\n",
    );
    write("a.rs", "use crate::Thing;\npub fn f() -> Thing { Thing }\n");
    write(
        "b.rs",
        "pub struct Thing;\n// crate::outer::x is a comment\nfn g() { let _ = \"crate::outer\"; }\n",
    );
    write("outer/mod.rs", "mod x;\nmod y;\npub use self::y::Y;\n");
    write(
        "outer/x.rs",
        "pub struct X;\nfn h(_: super::Y) { crate::a::f(); }\n",
    );
    write(
        "outer/y.rs",
        "pub struct Y;\n#[cfg(test)]\nmod tests { use crate::b; }\nfn k() -> super::x::X { super::x::X }\n",
    );
    write("tests.rs", "use crate::outer::X;\n");
    std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
    // Read through the same code as the real crates, rooted at the temp dir.
    let mut c = Crate {
        name: "demo".into(),
        mods: BTreeMap::new(),
    };
    c.load_file(Vec::new(), &src.join("lib.rs"), &src);
    c.link();
    assert!(!c.mods.contains_key(&vec!["tests".to_string()]));
    let cycles = c.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].scope, "demo::outer");
    assert_eq!(cycles[0].members, ["x", "y"]);
    assert!(
        cycles[0].text.starts_with("demo::outer: x -> y -> x"),
        "{cycles:?}"
    );
    // b uses nothing (comment, string), a uses b through the re-export.
    let g = c.graphs();
    assert!(g[&Vec::new()]["a"].contains_key("b"), "{g:?}");
    assert!(!g[&Vec::new()].contains_key("b"), "{g:?}");
    // y's test module's use of b is not read.
    let root: Vec<&String> = g[&Vec::new()]["outer"].keys().collect();
    assert_eq!(root, ["a"], "{g:?}");
}

/// The reader sees no edge through a glob import of an ancestor (`use
/// super::*;`, `use crate::*;`) that imports from its other children: the
/// names it brings may then be a sibling module's, used bare. Library code
/// imports those by name.
#[test]
fn library_code_has_no_glob_import_of_an_ancestor() {
    let mut found = Vec::new();
    for name in CRATES {
        let c = Crate::read(name);
        for (path, module) in &c.mods {
            for (bound, target) in &module.imports {
                let sibling_names = |t: &ModPath| {
                    let branch = &path[t.len()];
                    c.mods[t].imports.iter().any(|(_, p)| {
                        p.len() > t.len() && p.starts_with(t) && &p[t.len()] != branch
                    })
                };
                if bound.is_none()
                    && target.len() < path.len()
                    && path.starts_with(target)
                    && sibling_names(target)
                {
                    found.push(format!(
                        "{}: glob import of {name}::{}",
                        module.file.display(),
                        target.join("::")
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
