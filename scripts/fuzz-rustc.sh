#!/bin/sh
# RUSTC_WRAPPER for scripts/fuzz-smoke.sh's quick build: libFuzzer's coverage
# instrumentation (the flags `cargo fuzz build --sanitizer none` passes) for
# the code under test only (our crates and the fuzz targets), not for the
# third-party crates below them. Called as `fuzz-rustc.sh rustc ARGS...`.
rustc=$1
shift
ours=0
prev=
for a in "$@"; do
    if [ "$prev" = --crate-name ]; then
        case $a in
        cni_types | cni_exec | cni_netns | cni_ipam | cni_plugins) ours=1 ;;
        esac
    fi
    prev=$a
done
# The fuzz targets themselves: bins of the cni-fuzz package.
case " $* " in *" --cfg fuzz_target "* | *"/fuzz/fuzz_targets/"*) ours=1 ;; esac
if [ "$ours" = 1 ]; then
    exec "$rustc" "$@" -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
        -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
        -Cllvm-args=-sanitizer-coverage-pc-table \
        -Cllvm-args=-sanitizer-coverage-trace-compares \
        -Cllvm-args=-sanitizer-coverage-stack-depth \
        -Cllvm-args=-simplifycfg-branch-fold-threshold=0 --cfg fuzzing
fi
exec "$rustc" "$@"
