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
        iputils-ping curl ca-certificates procps kmod strace dnsmasq-base \
        containerd runc gcc libc6-dev python3 python3-pip >/dev/null
fi

# The trace tests' OTLP receiver (testkit/otlp_receiver.py) decodes with the
# official OpenTelemetry protobuf definitions; CNI_TEST_SKIP_OTLP=1 skips
# those tests instead. pip; on a Debian python (externally managed) with
# --break-system-packages (Debian has no package of it).
if [ "${SKIP_APT:-0}" != 1 ] &&
    ! python3 -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' 2>/dev/null; then
    python3 -m pip install -q opentelemetry-proto==1.29.0 2>/dev/null ||
        python3 -m pip install -q --break-system-packages opentelemetry-proto==1.29.0
fi

# The metrics tests read the exposition with Prometheus' own parser
# (prometheus_client); CNI_TEST_SKIP_PROMETHEUS=1 skips them instead. pip
# first; on a Debian python (externally managed, no pip) its package.
if [ "${SKIP_APT:-0}" != 1 ] && ! python3 -c 'import prometheus_client.parser' 2>/dev/null; then
    python3 -m pip install -q prometheus-client==0.21.1 2>/dev/null ||
        apt-get install -y -qq --no-install-recommends python3-prometheus-client >/dev/null
fi

# The bandwidth plugin's IFB devices: loading the module with its defaults
# would also create ifb0/ifb1 in the host namespace.
modprobe ifb numifbs=0 2>/dev/null || true

export CARGO_TERM_COLOR=never

# Each step prints `step <name>: N s` when it ends, and the whole list again
# at the end: where the suite's time goes.
STEP_TIMES=()
step() {
    local name=$1 start=$SECONDS
    shift
    "$@"
    STEP_TIMES+=("step $name: $((SECONDS - start)) s")
    echo "${STEP_TIMES[-1]}"
}
trap 'printf "%s\n" "${STEP_TIMES[@]}" "test-all.sh: ${SECONDS} s (load: $(cut -d" " -f1-3 /proc/loadavg))"; [ -z "${FUZZ_BUILD_PID:-}" ] || kill -- "-$FUZZ_BUILD_PID" 2>/dev/null || true' EXIT

# With its default features (none), cni-plugins builds every plugin but
# multus and cni-gc and carries none of their Kubernetes, TLS, YAML,
# certificate, HTTP/2, async and protobuf crates: what a library user who
# wants `bridge` in-process compiles. (tuning's sysctl allowlist, Go regexps,
# uses the small regex-lite.) Clippy type-checks the library and binaries of
# that build (`--lib --bins`: the tests enable every feature through a
# dev-dependency); the tree check below proves the dependency set.
no_multus_deps() {
    if cargo tree --locked -p cni-plugins -e normal --prefix none \
        | grep -E '^(ureq|rustls|rcgen|serde-saphyr|regex|h2|tokio|prost) '; then
        echo "test-all.sh: a multus- or cni-gc-only crate above is a dependency of cni-plugins with its default features" >&2
        return 1
    fi
}

step fmt cargo fmt --all -- --check
# Both lock files (the workspace's and fuzz/'s, a workspace of its own) must
# match the manifests: a stale fuzz/Cargo.lock otherwise fails only at the
# fuzz build, 15 minutes in.
lockfiles() {
    cargo metadata --locked --format-version 1 >/dev/null &&
        (cd fuzz && cargo metadata --locked --format-version 1 >/dev/null)
}
step lockfiles lockfiles
# Crates depend only on their own layer or lower ones (scripts/layers.txt);
# each library crate's top-level modules import each other without a cycle.
step import-graph scripts/import-graph.py
step clippy cargo clippy --workspace --all-targets --locked -- -D warnings
step clippy-no-multus cargo clippy --locked -p cni-plugins --lib --bins -- -D warnings
step tree-no-multus no_multus_deps
# The docs as docs.rs builds them: every feature, `--cfg docsrs` (the
# features' marks need RUSTC_BOOTSTRAP on the stable toolchain).
step doc env RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="-D warnings --cfg docsrs" \
    cargo doc --workspace --no-deps --all-features --locked --quiet
# Each library crate's public API against its checked-in listing
# (<crate>/public-api.txt; `scripts/public-api.py --bless` after a change
# that is meant). rustdoc JSON with every feature, in the main target
# directory: it reuses the doc step's checked dependencies (a directory of
# its own compiled them all again on a cold CI machine).
step public-api scripts/public-api.py
# Every test target and every binary of the workspace, in one build (so the
# compiles and links overlap), with the workspace's feature set: the steps
# below run these binaries as they are (a `cargo build`/`cargo run` without
# the tests, or with `-p X`, would resolve other features and build again).
step test-build cargo build --workspace --tests --bins --locked --quiet
# Every library crate packages and builds on its own, as crates.io would
# build it: `cargo package` unpacks each .crate and builds it, the
# unpublished workspace crates it needs taken from the other packages. After
# the test build, in the same target directory: the packaged crates' builds
# reuse its dependencies (3.5 min for the ten crates here; a target directory
# of its own compiled every dependency again, 30 min under load).
package_libs() {
    local args=() name
    while read -r name _; do args+=(-p "$name"); done < <(scripts/workspace.py)
    # cargo unpacks each crate of its temporary registry once, into
    # $CARGO_HOME/registry/src/-<hash>/<name>-<version>, and reuses that copy
    # while the version is the same; and a packaged file's mtime is fixed
    # (2006), so an earlier run's build of it looks fresh. Either way an old
    # cni-types would be built against the new cni-netns: our crates'
    # unpacked copies and the builds made from them go first.
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/cni-*
    local dep base
    for dep in $(grep -l '/registry/src/-' target/debug/deps/cni_*.d 2>/dev/null); do
        base=$(basename "$dep" .d)
        name=${base%-*}
        rm -rf "target/debug/.fingerprint/${name//_/-}-${base##*-}" \
            target/debug/deps/"$base".* target/debug/deps/lib"$base".*
    done
    cargo package --locked --allow-dirty --quiet "${args[@]}"
}
step package package_libs
# The fuzz targets' build (scripts/fuzz-smoke.sh, step fuzz-smoke below) runs
# in the background, at low priority, while the tests below wait on the kernel.
FUZZ_BUILD_LOG=$(mktemp)
# In a process group of its own (setsid), so that once the tests are done
# the whole build (cargo and the rustc it runs) gets normal priority back: at
# nice 15 it is starved by any other busy process at nice 0 (stress-ng --cpu 2
# held it to a few percent of a core, and the suite waited on it for an hour).
setsid nice -n 15 scripts/fuzz-smoke.sh --build-only >"$FUZZ_BUILD_LOG" 2>&1 &
FUZZ_BUILD_PID=$!
fuzz_build_done() {
    local rc=0
    renice -n 0 -g "$FUZZ_BUILD_PID" >/dev/null 2>&1 || true
    wait "$FUZZ_BUILD_PID" || rc=$?
    cat "$FUZZ_BUILD_LOG"
    rm -f "$FUZZ_BUILD_LOG"
    return "$rc"
}
# Six test threads on two cores: the integration tests spend most of their
# time waiting on the kernel, on processes and on protocol timers (the plugins
# binary uses a quarter of one core at two threads), and every test is written
# to run in parallel with the others.
step test cargo test --workspace --locked -- --test-threads=6
# The fake-kernel tests (the interface plugins' teardown order and ADD rollback, the
# example plugin's kernel steps, the fake itself) must need no root: they run
# again as nobody, from copies of their test binaries (the build is the one
# above; the target directory may not be readable by nobody).
no_root_tests() {
    local dir rc=0
    dir=$(mktemp -d)
    chmod 755 "$dir"
    cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
        jq -r 'select(.executable != null and .profile.test)
            | "\(.target.name)/\(.target.kind[0]) \(.executable)"' |
        while read -r name exe; do
            case $name in
            plugins/test | extra-routes/bin | cni_netns/lib) cp "$exe" "$dir/${name%%/*}" ;;
            esac
        done
    chmod 755 "$dir"/*
    # Each run must pass and run at least one test (a filter that matched
    # nothing would prove nothing).
    as_nobody() {
        local out
        out=$(cd "$dir" && setpriv --reuid 65534 --regid 65534 --clear-groups --reset-env "$@" 2>&1) &&
            grep -E '^test result: ok\. [1-9]' <<<"$out" && return 0
        echo "$out"
        echo "no-root: $* failed or ran no test" >&2
        return 1
    }
    # One run per module: several filters in one run pass if any matches.
    for module in teardown_faults:: add_rollback:: link_plugins_fake:: trait_plugins_fake:: flannel_plugin::; do
        as_nobody ./plugins "$module" || rc=1
    done
    as_nobody ./extra-routes || rc=1
    as_nobody ./cni_netns kernel:: || rc=1
    rm -rf "$dir"
    return "$rc"
}
step no-root no_root_tests
# The conformance kit against our plugins (must pass) and Go's (information).
step conformance env CONFORMANCE_SKIP_BUILD=1 scripts/conformance.sh
# A crate outside the workspace: serde round trips, plugin unit tests without
# root, and cni-conformance on its own plugin binary.
step outside-crate scripts/outside-crate.sh
# The nft-process firewall backend keeps full coverage (native is the default):
# cni-firewall's `netns` test binary (cni-netns's has no firewall module).
step test-nft-backend env CNI_FIREWALL_BACKEND=nft \
    cargo test --locked --workspace --test netns -- firewall:: firewall_traffic::
# Tests on the node's default paths (cni0, /run/flannel/subnet.env): they save
# and restore what was there, and must run alone.
step flannel-e2e cargo test --locked --workspace --test plugins -- --ignored --test-threads=1 flannel_e2e::
# The end-to-end benchmark in smoke mode (a few pods, our plugins exec'd and
# in-process, and the Go plugins): it must keep working; figures come from
# full runs (BENCHMARKS.md).
step e2e-smoke target/debug/e2e --smoke --plugins target/debug
# libFuzzer targets (fuzz/), a bounded run each; FUZZ_SECONDS sets the time.
step fuzz-build-wait fuzz_build_done
step fuzz-smoke env FUZZ_SECONDS="${FUZZ_SECONDS:-4}" scripts/fuzz-smoke.sh
# The README's quickstart and the in-process runtime example, on the debug build.
step quickstart target/debug/quickstart target/debug
step inprocess target/debug/inprocess
