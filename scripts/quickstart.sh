#!/usr/bin/env bash
# Quickstart: builds the plugins it uses and the quickstart program (release),
# then, as root, attaches one pod to a bridge + host-local + portmap network
# inside a throwaway namespace, proves connectivity, and tears it all down.
# Needs iproute2's `ip` only for your own inspection; ping comes from
# iputils-ping (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "quickstart.sh: run as root (it creates network namespaces)" >&2
    exit 1
fi
if ! command -v ping >/dev/null || ! command -v nft >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends iputils-ping nftables >/dev/null
fi
# Only what it runs: the three plugins (cni-plugins' default features: no
# multus Kubernetes client, no TLS stack) and the quickstart program. Release
# profile (fast to build); the shipped binaries use `dist` (scripts/dist.sh).
cargo build --release --quiet -p cni-plugins \
    --bin bridge --bin host-local --bin portmap -p cni-examples --bin quickstart
exec ./target/release/quickstart ./target/release
