#!/usr/bin/env bash
# The whole test suite, as CI runs it. Run as root on Debian 12: it installs the
# system packages the tests need (iproute2, nftables, the Go reference plugins in
# /usr/lib/cni for differential tests, ...) and then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "test-all.sh: run as root (the tests create network namespaces)" >&2
    exit 1
fi

if [ "${SKIP_APT:-0}" != 1 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        iproute2 nftables iptables conntrack jq containernetworking-plugins \
        iputils-ping curl ca-certificates procps kmod strace dnsmasq-base >/dev/null
fi

# The bandwidth plugin's IFB devices: loading the module with its defaults
# would also create ifb0/ifb1 in the host namespace.
modprobe ifb numifbs=0 2>/dev/null || true

export CARGO_TERM_COLOR=never
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Without its default `multus` feature, cni-plugins builds every other plugin
# and carries none of multus's Kubernetes, TLS, YAML and certificate crates.
# (tuning's sysctl allowlist, Go regexps, uses the small regex-lite.)
cargo clippy --locked -p cni-plugins --no-default-features --all-targets -- -D warnings
cargo build --locked -p cni-plugins --no-default-features
if cargo tree --locked -p cni-plugins --no-default-features -e normal --prefix none \
    | grep -E '^(ureq|rustls|rcgen|serde-saphyr|regex) '; then
    echo "test-all.sh: a multus-only crate above is a dependency of cni-plugins without the multus feature" >&2
    exit 1
fi
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
cargo test --workspace --locked
# The conformance kit against our plugins (must pass) and Go's (information).
scripts/conformance.sh
# A crate outside the workspace: serde round trips, plugin unit tests without
# root, and cni-conformance on its own plugin binary.
scripts/outside-crate.sh
# The nft-process firewall backend keeps full coverage (native is the default).
CNI_FIREWALL_BACKEND=nft cargo test --locked -p cni-netns --test netns -- firewall:: firewall_traffic::
# Tests on the node's default paths (cni0, /run/flannel/subnet.env): they save
# and restore what was there, and must run alone.
cargo test --locked -p cni-plugins --test plugins -- --ignored --test-threads=1 flannel_e2e::
# The end-to-end benchmark in smoke mode (a few pods, our plugins exec'd and
# in-process, and the Go plugins): it must keep working; figures come from
# full runs (BENCHMARKS.md).
cargo run -q --locked -p cni-benches --bin e2e -- --smoke --plugins target/debug
# libFuzzer targets (fuzz/), a bounded run each; FUZZ_SECONDS sets the time.
scripts/fuzz-smoke.sh
# The README's quickstart and the in-process runtime example, on the debug build.
cargo run -q --locked -p cni-examples --bin quickstart -- target/debug
cargo run -q --locked -p cni-examples --bin inprocess
