#!/usr/bin/env bash
# The conformance kit (cni-conformance) against every plugin of ours in
# target/debug it has a config for, and against the Go reference plugins in
# /usr/lib/cni. Run as root (the kit creates its own network namespaces).
#
# Fails when the kit itself crashes or cannot run (exit status other than 0
# or 1), or when one of OUR plugins fails a case, except a case that failed
# only because this kernel lacks the link type ("... is not supported by
# this kernel": ipvlan, vlan, dummy, vrf here). The Go plugins' failures are
# printed as information and never fail the script.
set -uo pipefail
cd "$(dirname "$0")/.."

# The workspace's feature set (no `-p`). CONFORMANCE_SKIP_BUILD=1 uses the
# binaries as they are (scripts/test-all.sh built them with the tests).
if [ "${CONFORMANCE_SKIP_BUILD:-0}" != 1 ]; then
    cargo build -q --locked --workspace --bins
fi
KIT=target/debug/cni-conformance
GO_DIR=${GO_PLUGIN_DIR:-/usr/lib/cni}
TYPES="bridge ptp macvlan ipvlan vlan host-device loopback dummy tap host-local static
       tuning bandwidth portmap firewall sbr vrf passthru flannel"

status=0
# The kit creates its own uniquely named namespaces, so plugins run side by
# side (CONFORMANCE_JOBS at a time; each run mostly waits on the kernel);
# each one's output goes to a file and is printed in order below.
JOBS=${CONFORMANCE_JOBS:-4}
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT
run_kit() { # name binary
    "$KIT" "$2" >"$out_dir/$1.out" 2>&1
    echo $? >"$out_dir/$1.rc"
}
running=0
for p in $TYPES; do
    for side in ours go; do
        if [ $side = ours ]; then bin=target/debug/$p; else bin=$GO_DIR/$p; fi
        [ -x "$bin" ] || continue
        run_kit "$side-$p" "$bin" &
        running=$((running + 1))
        if [ "$running" -ge "$JOBS" ]; then
            wait -n || true
            running=$((running - 1))
        fi
    done
done
wait

for p in $TYPES; do
    bin=target/debug/$p
    [ -x "$bin" ] || continue
    echo "== cni-conformance $bin"
    out=$(cat "$out_dir/ours-$p.out"); rc=$(cat "$out_dir/ours-$p.rc")
    # Indented: the kit's "N passed, M failed" lines are per plugin, not
    # the suite's closing line.
    printf '%s\n' "$out" | sed 's/^/  | /'
    case $rc in
        0) ;;
        1)
            if printf '%s\n' "$out" | grep '^FAIL ' | grep -qv 'is not supported by this kernel'; then
                echo "conformance: our $p fails the kit" >&2
                status=1
            else
                echo "(every failure above is a link type this kernel lacks)"
            fi
            ;;
        *)
            echo "conformance: the kit crashed on our $p (exit $rc)" >&2
            status=1
            ;;
    esac
done

for p in $TYPES; do
    bin=$GO_DIR/$p
    [ -x "$bin" ] || continue
    echo "== cni-conformance $bin (Go reference: failures are information)"
    out=$(cat "$out_dir/go-$p.out"); rc=$(cat "$out_dir/go-$p.rc")
    printf '%s\n' "$out" | sed 's/^/  | /'
    if [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
        echo "conformance: the kit crashed on Go's $p (exit $rc)" >&2
        status=1
    fi
done

exit $status
