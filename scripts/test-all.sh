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
        iputils-ping curl ca-certificates procps kmod >/dev/null
fi

export CARGO_TERM_COLOR=never
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
cargo test --workspace --locked
