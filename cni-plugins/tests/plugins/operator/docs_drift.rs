//! Every plugin reference page (`docs/plugins/<name>.md`) documents every
//! key its plugin's config structs accept (`cni_plugins::config_keys`), has
//! the sections of the common format, and a conflist example that parses.

use std::collections::BTreeSet;
use std::path::PathBuf;

use cni_plugins::config_keys::PLUGINS;

/// Keys every plugin reads from the spec's `NetworkConfig`.
const SPEC_KEYS: &[&str] = &["cniVersion", "name", "type"];

const SECTIONS: &[&str] = &[
    "## Purpose",
    "## Configuration",
    "## Capabilities",
    "## Example",
    "## Result",
    "## Differences from the Go plugin",
    "## GC and STATUS",
];

fn pages_dir() -> PathBuf {
    super::workspace().join("docs/plugins")
}

fn page(name: &str) -> String {
    let path = pages_dir().join(format!("{name}.md"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn every_config_key_is_on_its_page() {
    let mut missing = Vec::new();
    for (name, keys) in PLUGINS {
        let text = page(name);
        let keys = keys();
        for key in SPEC_KEYS
            .iter()
            .map(|k| k.to_string())
            .chain(keys.into_iter().map(|(k, _)| k))
        {
            if !text.contains(&format!("`{key}`")) {
                missing.push(format!("{name}: `{key}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys accepted by a plugin's config but not on its page (docs/plugins/<name>.md):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn every_page_has_the_common_sections_in_order() {
    for (name, _) in PLUGINS {
        let text = page(name);
        assert!(
            text.starts_with(&format!("# {name}\n")),
            "{name}.md must start with `# {name}`"
        );
        let mut at = 0;
        for s in SECTIONS {
            let found = text[at..]
                .find(&format!("\n{s}\n"))
                .unwrap_or_else(|| panic!("{name}.md: section {s:?} missing or out of order"));
            at += found + 1;
        }
        assert!(
            text.contains("| key | type | default | notes"),
            "{name}.md: the Configuration table header is missing"
        );
    }
}

/// Each page's first ```json block is a conflist our parser accepts, and
/// names the plugin.
#[test]
fn every_example_is_a_valid_conflist() {
    for (name, _) in PLUGINS {
        let text = page(name);
        let start = text
            .find("```json\n")
            .unwrap_or_else(|| panic!("{name}.md: no ```json example"));
        let body = &text[start + 8..];
        let end = body.find("\n```").expect("closed code block");
        let json = &body[..end];
        let list = cni_types::NetworkConfigList::from_slice(json.as_bytes())
            .unwrap_or_else(|e| panic!("{name}.md example: {e}\n{json}"));
        let types: Vec<String> = list
            .plugins
            .iter()
            .map(|p| {
                p.get("type")
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        let ipam = serde_json::from_str::<serde_json::Value>(json)
            .unwrap()
            .to_string();
        assert!(
            types.iter().any(|t| t == name) || ipam.contains(&format!("\"type\":\"{name}\"")),
            "{name}.md example does not use {name}: {types:?}"
        );
    }
}

/// Pages and table agree: a page nobody checks, or a table entry without a
/// page, fails (add the plugin to `cni_plugins::config_keys::PLUGINS`).
#[test]
fn every_page_is_in_the_table_and_back() {
    let pages: BTreeSet<String> = std::fs::read_dir(pages_dir())
        .expect("docs/plugins exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".md").map(str::to_string))
        .filter(|f| f != "README")
        .collect();
    let table: BTreeSet<String> = PLUGINS.iter().map(|(n, _)| n.to_string()).collect();
    let unchecked: Vec<_> = pages.difference(&table).collect();
    assert!(
        unchecked.is_empty(),
        "pages without an entry in cni_plugins::config_keys::PLUGINS (add \
         (\"<name>\", || accepted_keys::<ItsConfig>()) there): {unchecked:?}"
    );
    let without_page: Vec<_> = table.difference(&pages).collect();
    assert!(
        without_page.is_empty(),
        "plugins without a page: {without_page:?}"
    );
}
