#!/usr/bin/env bash
# Release tarball in upstream containernetworking/plugins' shape:
#
#   dist/cni-rs-plugins-linux-<arch>-v<VERSION>.tgz      flat: ./bridge ./host-local ... ./LICENSE ./README
#   dist/cni-rs-plugins-linux-<arch>-v<VERSION>.tgz.sha256
#   dist/cni-rs-plugins-linux-<arch>-v<VERSION>.tgz.sha512
#
# Usage: scripts/dist.sh [--no-build] [--bin-dir DIR] [--out DIR] VERSION
#
#   VERSION       e.g. 0.1.0 (a leading "v" is accepted and dropped)
#   --no-build    package the binaries already built (no cargo run)
#   --bin-dir DIR take the binaries from DIR (implies --no-build); default: the
#                 `dist`-profile binaries of target/dist-build
#   --out DIR     write into DIR instead of dist/
#
# Every binary of cni-plugins (the plugins, multus-daemon, multus-shim,
# cni-install, cni-gc) goes in, named as cargo names it; the list comes from
# `cargo metadata`, so a new plugin is packaged without editing this file.
# The README names the plugins apart from the programs that are not plugins
# (`[package.metadata.cni-rs] programs` in cni-plugins/Cargo.toml).
#
# Reproducible: the same sources and toolchain give the same tarball bytes.
# - Binaries: the `dist` profile (fat LTO, one codegen unit, stripped: the
#   smallest binaries, BENCHMARKS.md "Build profiles"), built in their own
#   target dir (target/dist-build) with
#   --remap-path-prefix for the workspace and CARGO_HOME, so that no path of
#   this machine is embedded (panic locations of dependencies otherwise name
#   ~/.cargo/registry/...); rustc embeds no timestamp.
# - Archive: names sorted, every mtime SOURCE_DATE_EPOCH (default: the last
#   commit's time), owner and group 0 with numeric ids, modes set explicitly
#   (0755 binaries, 0644 texts) whatever the umask, GNU format, and gzip -n
#   (no name or time in the gzip header). SOURCE_DATE_EPOCH is kept out of
#   the cargo build: the binaries do not depend on it, and build scripts
#   that compile C with the cc crate (ring's) rerun when it changes (every
#   commit), which relinks everything with fat LTO.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

die() {
    echo "dist.sh: $*" >&2
    exit 1
}

build=1
bin_dir=""
out_dir="dist"
version=""
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0 ;;
        --bin-dir)
            [ $# -ge 2 ] || die "--bin-dir needs a directory"
            bin_dir=$2
            build=0
            shift
            ;;
        --out)
            [ $# -ge 2 ] || die "--out needs a directory"
            out_dir=$2
            shift
            ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        -*) die "unknown option $1 (see --help)" ;;
        *)
            [ -z "$version" ] || die "one VERSION only (got '$version' and '$1')"
            version=$1
            ;;
    esac
    shift
done

[ -n "$version" ] || die "missing VERSION (usage: scripts/dist.sh [--no-build] [--bin-dir DIR] [--out DIR] VERSION, e.g. 0.1.0); nothing written"
version=${version#v}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] ||
    die "VERSION '$version' is not a semantic version like 1.2.3 or 1.2.3-rc.1; nothing written"
command -v jq >/dev/null || die "jq is needed to list the binaries (apt-get install jq)"

case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    armv7l) arch=arm ;;
    ppc64le) arch=ppc64le ;;
    s390x) arch=s390x ;;
    riscv64) arch=riscv64 ;;
    *) die "unknown machine $(uname -m)" ;;
esac

epoch=${SOURCE_DATE_EPOCH:-}
if [ -z "$epoch" ]; then
    epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi
[[ "$epoch" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH '$epoch' is not a number of seconds"
# For the archive only (see the top).
unset SOURCE_DATE_EPOCH

meta=$(cargo metadata --no-deps --format-version 1 --offline |
    jq '.packages[] | select(.name == "cni-plugins")')
mapfile -t bins < <(jq -r '.targets[] | select(.kind | index("bin")) | .name' <<<"$meta" | LC_ALL=C sort)
[ "${#bins[@]}" -gt 0 ] || die "cargo metadata lists no binary in cni-plugins"
mapfile -t programs < <(jq -r '.metadata["cni-rs"].programs[]' <<<"$meta" | LC_ALL=C sort)
plugins=()
for b in "${bins[@]}"; do
    case " ${programs[*]} " in
        *" $b "*) ;;
        *) plugins+=("$b") ;;
    esac
done
[ "$((${#plugins[@]} + ${#programs[@]}))" = "${#bins[@]}" ] ||
    die "[package.metadata.cni-rs] programs names a binary cni-plugins does not have: ${programs[*]}"

if [ "$build" = 1 ]; then
    cargo_home=${CARGO_HOME:-$HOME/.cargo}
    export CARGO_TARGET_DIR="$root/target/dist-build"
    export RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$root=/cni-rs --remap-path-prefix=$cargo_home=/cargo"
    # Every feature: multus (multus, multus-shim, multus-daemon) and gc
    # (cni-gc) are off by default for library users.
    echo "dist.sh: cargo build --profile dist -p cni-plugins --features multus,gc --bins (fat LTO: slow)" >&2
    cargo build --profile dist --locked -p cni-plugins --features multus,gc --bins
    bin_dir="$CARGO_TARGET_DIR/dist"
elif [ -z "$bin_dir" ]; then
    bin_dir="$root/target/dist-build/dist"
fi

name="cni-rs-plugins-linux-$arch-v$version"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/pkg"
for b in "${bins[@]}"; do
    [ -f "$bin_dir/$b" ] || die "$bin_dir/$b is missing (build first, or drop --no-build); nothing written"
    install -m 0755 "$bin_dir/$b" "$stage/pkg/$b"
done
install -m 0644 "$root/LICENSE" "$stage/pkg/LICENSE"
{
    echo "cni-rs plugins v$version (linux/$arch)"
    echo
    echo "CNI plugins in Rust, drop-in replacements for containernetworking/plugins,"
    echo "flannel's CNI plugin and Multus (thin: multus; thick: multus-daemon +"
    echo "multus-shim). One binary per plugin:"
    echo
    printf '  %s\n' "${plugins[@]}"
    echo
    echo "and the programs that are not plugins:"
    echo
    printf '  %s\n' "${programs[@]}"
    echo
    echo "Install on a node: ./cni-install --to /opt/cni/bin (every plugin, no program)"
    echo "  (atomic per file: temp name + rename, so running pods are never disturbed;"
    echo "   --only a,b for a subset, --skip-existing to keep what is there)."
    echo "Collect what the runtime leaked (pods whose DEL never ran): cni-gc, asking"
    echo "  the runtime over CRI which pods are alive (--dry-run first; a systemd timer"
    echo "  and a DaemonSet container: deploy/ and docs/cni-gc.md in the repository)."
    echo "Each plugin's options: docs/plugins/<name>.md in the source repository."
    echo "License: MIT OR Apache-2.0 (LICENSE)."
} >"$stage/pkg/README"
chmod 0644 "$stage/pkg/README"
chmod 0755 "$stage/pkg"

tar -C "$stage/pkg" --sort=name --format=gnu \
    --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -cf "$stage/$name.tar" .
gzip -n -9 <"$stage/$name.tar" >"$stage/$name.tgz"
(cd "$stage" && sha256sum "$name.tgz" >"$name.tgz.sha256" && sha512sum "$name.tgz" >"$name.tgz.sha512")

mkdir -p "$out_dir"
for f in "$name.tgz" "$name.tgz.sha256" "$name.tgz.sha512"; do
    mv -f "$stage/$f" "$out_dir/$f"
done
echo "$out_dir/$name.tgz"
cat "$out_dir/$name.tgz.sha256"
