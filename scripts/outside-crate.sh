#!/usr/bin/env bash
# A crate OUTSIDE this workspace, with path dependencies on our crates, does
# what issue #18 promises plugin and runtime authors:
#  (a) parse, edit and re-serialize configs and results with serde, and get
#      its edits back;
#  (b) unit-test its plugin's ADD and DEL without root and without processes;
#  (c) run cni-conformance on its plugin binary (as root).
# It shares this workspace's target directory, so our crates are not built
# twice. Run from anywhere; needs target/debug/cni-conformance for (c).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/cni-outside.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
cp "$repo/Cargo.lock" "$work/Cargo.lock"
cat > "$work/Cargo.toml" <<EOF
[package]
name = "ext-plugin"
version = "0.1.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
cni-types = { path = "$repo/cni-types" }
cni-exec = { path = "$repo/cni-exec" }
serde = { version = "1", features = ["derive"] }
serde_json = { version = "1", features = ["preserve_order"] }

# The workspace's dev profile: with the same flags, the dependencies this
# crate shares with the workspace are reused from its target directory.
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false
EOF
cat > "$work/src/main.rs" <<'EOF'
//! A chained plugin of a third party: it adds a route to the result it is
//! given (no kernel work, so its behaviour is all in its result).
use cni_exec::{Plugin, Request};
use cni_types::{CniError, CniResult, Route};

struct AddRoute;

impl Plugin for AddRoute {
    type Error = CniError;
    fn name(&self) -> &str {
        "ext-plugin"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let mut r = req
            .config
            .prev_result()?
            .ok_or_else(|| CniError::invalid_config("must be chained"))?;
        let dst = req
            .config
            .specific()
            .get("dst")
            .and_then(|v| v.as_str())
            .unwrap_or("192.0.2.0/24");
        let dst = cni_types::json::parse_cidr(dst).map_err(CniError::invalid_config)?;
        r.routes.push(Route::new(dst, None));
        Ok(r)
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

fn main() {
    cni_exec::run(&AddRoute)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_exec::Command;
    use cni_types::{IpConfig, NetworkConfig, NetworkConfigList, VersionedResult};
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    /// (a) configs and results as data inside our own serde struct.
    #[test]
    fn configs_round_trip_with_serde() {
        #[derive(Serialize, Deserialize)]
        struct Saved {
            list: NetworkConfigList,
            result: VersionedResult,
        }
        let mut list = NetworkConfigList::from_slice(
            br#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge","x":1}]}"#,
        )
        .unwrap();
        let mut conf = NetworkConfig::from_map(list.plugins[0].clone()).unwrap();
        conf.ip_masq = true;
        conf.set_specific("x", json!(2)).unwrap();
        list.plugins[0] = conf.to_map();
        list.name = "renamed".into();
        let mut result = CniResult::default();
        result.ips.push(IpConfig::new("10.0.0.2/24".parse().unwrap()));
        let saved = Saved {
            list,
            result: VersionedResult { version: cni_types::Version::V0_4_0, result },
        };
        let text = serde_json::to_string(&saved).unwrap();
        let back: Saved = serde_json::from_str(&text).unwrap();
        assert_eq!(back.list.name, "renamed");
        assert_eq!(back.list.plugins[0]["x"], 2);
        assert_eq!(back.list.plugins[0]["ipMasq"], true);
        assert_eq!(back.result.version, cni_types::Version::V0_4_0);
        assert_eq!(back.result.result.ips[0].address.to_string(), "10.0.0.2/24");
    }

    /// (b) the plugin's ADD and DEL, no root, no processes.
    #[test]
    fn add_and_del_unit_tested() {
        let mut prev = CniResult::default();
        prev.ips.push(IpConfig::new("10.0.0.2/24".parse().unwrap()));
        let conf = NetworkConfig::builder("net", "ext-plugin")
            .cni_version("1.0.0")
            .prev_result(&prev)
            .specific("dst", json!("198.51.100.0/24"))
            .build()
            .unwrap();
        let req = Request::builder(Command::Add, conf.clone())
            .container_id("c1")
            .netns("/run/netns/none")
            .ifname("eth0")
            .build()
            .unwrap();
        let r = AddRoute.add(&req).unwrap();
        assert_eq!(r.routes[0].dst.to_string(), "198.51.100.0/24");
        let req = Request::builder(Command::Del, conf).container_id("c1").ifname("eth0").build().unwrap();
        AddRoute.del(&req).unwrap();
    }
}
EOF
cd "$work"
export CARGO_TARGET_DIR="$repo/target"
# The copied lock pins the workspace's versions; --offline resolves from the
# crates the workspace already fetched.
cargo test --quiet --offline 2>/dev/null || cargo test --quiet
cargo build --quiet --offline 2>/dev/null || cargo build --quiet
bin="$repo/target/debug/ext-plugin"
if [ "$(id -u)" = 0 ] && [ -x "$repo/target/debug/cni-conformance" ]; then
    echo '{"cniVersion":"1.0.0","name":"ext","type":"ext-plugin","dst":"203.0.113.0/24"}' > "$work/ext.conf"
    out=$("$repo/target/debug/cni-conformance" --role chained --config "$work/ext.conf" "$bin") || {
        printf '%s\n' "$out" | sed 's/^/  | /'
        echo "outside-crate.sh: the outside crate's plugin fails cni-conformance" >&2
        exit 1
    }
    printf '%s\n' "$out" | sed 's/^/  | /'
elif [ "${CNI_TEST_ALLOW_SKIP:-0}" = 1 ]; then
    echo "SKIP: cni-conformance on the outside crate's plugin needs root and target/debug/cni-conformance"
else
    echo "outside-crate.sh: (c) needs root and target/debug/cni-conformance (build: cargo build -p cni-testkit)" >&2
    exit 1
fi
rm -f "$bin"
