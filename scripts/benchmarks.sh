#!/usr/bin/env bash
# The figures of BENCHMARKS.md ("Node scale"), ours beside Go's, from ONE run
# of target/release/e2e: the chain per mode (sequential and 2 in flight), DEL
# next to the kernel's veth deletion, process start next to /bin/true and to
# empty Rust programs (dynamic and static: the loader's floor), ADD p50 at 50
# and 1000 pods next to the in-process kernel floor, a burst of 100 pods with
# 8 in flight, and one GC of 1000 dead attachments; then the configuration
# matrix (address families x chains, ours and Go's, one table). Run as root
# on a quiet machine (it prints the load average at the start and the end):
#
#     scripts/benchmarks.sh [extra e2e arguments]      # e.g. --plugins target/dist
#
# Everything it creates lives in throwaway namespaces and temporary
# directories and is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "benchmarks.sh: run as root (the benchmark creates network namespaces)" >&2
    exit 1
fi
for need in /usr/lib/cni/bridge /usr/bin/time /usr/sbin/nft; do
    [ -e "$need" ] || {
        echo "benchmarks.sh: $need missing: apt-get install -y containernetworking-plugins time nftables" >&2
        exit 1
    }
done

cargo build --release --locked -q -p cni-plugins \
    --bin bridge --bin host-local --bin portmap --bin loopback \
    --bin tuning --bin bandwidth --bin ptp --bin macvlan \
    -p cni-benches --bin e2e

# The start floors: `fn main() {}` built as the release profile builds
# (opt-level 3, symbols stripped), linked against glibc dynamically (as our
# plugins are) and statically (no loader work at all).
floors=$(mktemp -d)
state_dir=$(mktemp -d)
cleanup() {
    mountpoint -q "$state_dir/mnt" 2>/dev/null && umount "$state_dir/mnt"
    rm -rf "$floors" "$state_dir"
}
trap cleanup EXIT
echo 'fn main() {}' > "$floors/noop.rs"
rustc -C opt-level=3 -C strip=symbols -o "$floors/rust-noop-dynamic" "$floors/noop.rs"
rustc -C opt-level=3 -C strip=symbols -C target-feature=+crt-static \
    -o "$floors/rust-noop-static" "$floors/noop.rs"
rm "$floors/noop.rs"
# Our plugins linked statically (`-C target-feature=+crt-static` on the final
# binary only: `cargo rustc` passes it to the bin crate, the dependencies are
# the release build's): what the loader and libgcc_s's constructor cost
# them. Built in place, copied out, then the dynamic ones rebuilt.
if [ "${NO_STATIC:-0}" != 1 ]; then
    for b in bridge host-local portmap loopback; do
        cargo rustc --release --locked -q -p cni-plugins --bin "$b" -- -C target-feature=+crt-static
        cp "target/release/$b" "$floors/static-$b"
    done
    cargo build --release --locked -q -p cni-plugins \
        --bin bridge --bin host-local --bin portmap --bin loopback
fi

echo "# benchmarks.sh $(date -u +%FT%TZ) on $(nproc) CPUs, kernel $(uname -r)"
echo "# load at start: $(cat /proc/loadavg)"
target/release/e2e --pods 200 \
    --scaling 50,1000 --floor 50,1000 --repeat 3 \
    --burst 100 --in-flight 8 \
    --gc 1000 \
    --start-floors "$floors" "$@"
# The scaling again with the runtime's and host-local's state on a journaled
# ext4 (a loop device), as a node's /var/lib/cni would be: this VM's root
# file system (/tmp) has no journal, and ext4 without one skips every inode
# freed in the last 1-6 minutes when it allocates (`recently_deleted`), which
# a benchmark that has just deleted thousands of files pays at each file it
# creates. tmpfs when no loop device can be had.
if truncate -s 3G "$state_dir/fs.img" && mkfs.ext4 -q -F "$state_dir/fs.img" \
    && mkdir "$state_dir/mnt" && mount -o loop "$state_dir/fs.img" "$state_dir/mnt"; then
    state="$state_dir/mnt" what="a journaled ext4 on a loop device"
else
    state=/dev/shm what="tmpfs (no loop device)"
fi
echo
echo "# the scaling with TMPDIR on $what"
TMPDIR="$state" target/release/e2e --only --scaling 50,1000 --floor 50,1000 --repeat 3
echo
# The configuration matrix: {IPv4, dual-stack, IPv6-only} x {bridge chain,
# + tuning + bandwidth, ptp, macvlan}, ours and Go's in the same run (the
# ptp and macvlan cells with IPv6 wait for DAD, Go's and ours: ~12 minutes).
echo "# the configuration matrix"
target/release/e2e --matrix --matrix-pods 30 --matrix-burst 100 --in-flight 8 "$@"
echo
echo "# load at end: $(cat /proc/loadavg)"
