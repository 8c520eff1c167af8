//! One list of plugins: every binary of cni-plugins is a plugin but the
//! `programs` of `[package.metadata.cni-rs]` in its Cargo.toml
//! ([`super::binaries`]). `scripts/dist.sh` and `cni-install` derive theirs
//! from it; the lists written by hand (the DaemonSet's `--only`, the docs
//! index, the README's feature table and commands, multus's in-process
//! delegates) are checked against it here.

use std::collections::BTreeSet;

use super::{binaries, workspace};

fn read(path: &str) -> String {
    let p = workspace().join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The words of a table cell: names like `host-device`, links and
/// backticks stripped.
fn words(cell: &str) -> BTreeSet<String> {
    cell.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The first cells of the table rows after `heading` (up to the next
/// heading), header and separator rows left out.
fn first_cells(text: &str, heading: &str) -> Vec<String> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    text[start + heading.len()..]
        .lines()
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|l| l.split('|').next())
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.starts_with("---") && *c != "plugin")
        .map(str::to_string)
        .collect()
}

fn missing<'a>(
    want: impl IntoIterator<Item = &'a String>,
    have: &BTreeSet<String>,
) -> Vec<&'a String> {
    want.into_iter().filter(|w| !have.contains(*w)).collect()
}

#[test]
fn programs_are_binaries_and_the_installer_knows_them() {
    let b = binaries();
    assert!(
        b.programs.contains(cni_plugins::install::INSTALLER_NAME),
        "{:?}",
        b.programs
    );
    let unknown: Vec<_> = b.programs.difference(&b.all).collect();
    assert!(
        unknown.is_empty(),
        "[package.metadata.cni-rs] programs names no binary of cni-plugins: {unknown:?}"
    );
    // build.rs reads the manifest by hand: it must agree with cargo.
    let compiled: BTreeSet<String> = cni_plugins::install::PROGRAMS
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        compiled, b.programs,
        "install::PROGRAMS against cargo metadata"
    );
}

/// The index table of docs/plugins/README.md links every page, and names
/// every plugin (multus-shim on multus's row); every page of the drift
/// table (`config_keys::PLUGINS`) is a plugin.
#[test]
fn the_docs_index_names_every_plugin_and_links_every_page() {
    let b = binaries();
    let index = read("docs/plugins/README.md");
    let cells = first_cells(&index, "| plugin | kind |");
    let mut linked = BTreeSet::new();
    let mut named = BTreeSet::new();
    for cell in &cells {
        let page = cell
            .strip_prefix('[')
            .and_then(|c| c.split_once("](").map(|(_, rest)| rest))
            .and_then(|rest| rest.split_once(".md)").map(|(page, _)| page))
            .unwrap_or_else(|| panic!("index row {cell:?} does not start with a page link"));
        linked.insert(page.to_string());
        named.extend(words(cell));
    }
    let pages: BTreeSet<String> = std::fs::read_dir(workspace().join("docs/plugins"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".md").map(str::to_string))
        .filter(|f| f != "README")
        .collect();
    assert_eq!(
        linked, pages,
        "docs/plugins/README.md links exactly the pages"
    );
    let plugins = b.plugins();
    assert_eq!(
        missing(&plugins, &named),
        Vec::<&String>::new(),
        "plugins not named in the docs index (docs/plugins/README.md); a binary \
         that is not a plugin goes into [package.metadata.cni-rs] programs"
    );
    let keyed: BTreeSet<String> = cni_plugins::config_keys::PLUGINS
        .iter()
        .map(|(page, _)| page.to_string())
        .collect();
    assert_eq!(
        missing(&keyed, &plugins),
        Vec::<&String>::new(),
        "config_keys::PLUGINS pages that are no plugin binary"
    );
}

/// deploy/cni-plugins-daemonset.yml installs every plugin but the multus
/// ones (deploy/multus-daemonset-thick.yml installs multus-shim).
#[test]
fn the_daemonset_installs_every_plugin_but_multus() {
    let b = binaries();
    let text = read("deploy/cni-plugins-daemonset.yml");
    let mut lines = text.lines().map(str::trim);
    lines
        .find(|l| *l == "- --only")
        .expect("the DaemonSet passes --only");
    let only: BTreeSet<String> = lines
        .find(|l| !l.starts_with('#'))
        .and_then(|l| l.strip_prefix("- "))
        .expect("--only's value")
        .split(',')
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = b.plugins().difference(&b.multus).cloned().collect();
    assert_eq!(only, want, "deploy/cni-plugins-daemonset.yml --only");
}

/// README.md: a row of the feature table per plugin, and its `--only`
/// examples name plugins or programs of the crate (`--only cni-gc`).
#[test]
fn the_readme_has_a_row_per_plugin_and_installs_only_plugins() {
    let b = binaries();
    let plugins = b.plugins();
    let readme = read("README.md");
    let named: BTreeSet<String> = first_cells(&readme, "| plugin | status | notes |")
        .iter()
        .flat_map(|c| words(c))
        .collect();
    assert_eq!(
        missing(&plugins, &named),
        Vec::<&String>::new(),
        "plugins without a row in README.md's feature table"
    );
    let mut examples = 0;
    for (i, _) in readme.match_indices("--only ") {
        let list = readme[i + 7..]
            .split(|c: char| c.is_whitespace() || c == '`')
            .next()
            .unwrap_or("");
        for name in list.split(',') {
            assert!(
                plugins.contains(name) || b.programs.contains(name),
                "README.md: --only {list}: {name} is no binary of cni-plugins"
            );
        }
        examples += 1;
    }
    assert!(examples > 0, "README.md shows no --only example");
}

/// multus runs every other plugin of this build in-process
/// (`binary::all_delegates`).
#[test]
fn multus_delegates_every_other_plugin_in_process() {
    let b = binaries();
    let delegates = cni_plugins::binary::all_delegates();
    let missing: Vec<String> = b
        .plugins()
        .difference(&b.multus)
        .filter(|p| !delegates.is_registered(p))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "not registered in binary::all_delegates: {missing:?}"
    );
}
