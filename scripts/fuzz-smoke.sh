#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ and runs each for a bounded time.
# Fails on any crash, hang (timeout) or out-of-memory; prints, per target,
# the executions run and the crashes found.
#
#   FUZZ_SECONDS   seconds per target (default 10)
#   FUZZ_JOBS      targets run at the same time (default 2)
#   FUZZ_TARGETS   space-separated subset (default: every target)
#   FUZZ_MAX_LEN   libFuzzer -max_len (default 16384)
#   FUZZ_LOG_DIR   keep each target's libFuzzer log there (default: removed)
#   FUZZ_BUILD     `quick` or `full` (default: quick up to 60 seconds per
#                  target, full above)
#
#   scripts/fuzz-smoke.sh --build-only   builds and exits (the suite starts
#                                        the build early, in the background)
#
# The full campaign (10 minutes per target, two at a time):
#   FUZZ_SECONDS=600 scripts/fuzz-smoke.sh
#
# Two builds. `full` is cargo-fuzz's: the release profile, every crate
# instrumented, about 390 CPU-seconds from cold here; `cargo fuzz run` reuses
# it. `quick` (the suite's smoke) is the dev profile with the instrumentation
# on the code under test only (our crates and the targets, through
# scripts/fuzz-rustc.sh as RUSTC_WRAPPER): about 155 CPU-seconds from cold,
# a tenth of the executions per second, the same coverage feedback on our
# code.
#
# Stable toolchain only: with no sanitizer, the coverage instrumentation is
# plain `-C` flags (the ones `cargo fuzz build --sanitizer none` passes), so
# neither nightly nor cargo-fuzz is needed. The corpus grows in
# fuzz/corpus/<target> (not committed; fuzz/seeds/<target> is), crash inputs
# land in fuzz/artifacts/<target>/; fuzz/dicts/<target>.dict, when present,
# gives libFuzzer the format's keywords.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

SECONDS_PER_TARGET="${FUZZ_SECONDS:-10}"
JOBS="${FUZZ_JOBS:-2}"
MAX_LEN="${FUZZ_MAX_LEN:-16384}"
ALL_TARGETS=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^cni-fuzz$')
TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"

# libfuzzer-sys compiles libFuzzer (C++).
if ! command -v c++ >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null
fi

HOST=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_INCREMENTAL=0
if [ "$SECONDS_PER_TARGET" -le 60 ]; then BUILD="${FUZZ_BUILD:-quick}"; else BUILD="${FUZZ_BUILD:-full}"; fi
build_start=$(date +%s)
case $BUILD in
quick)
    RUSTC_WRAPPER="$PWD/../scripts/fuzz-rustc.sh" cargo build --locked --quiet --bins
    BIN="${CARGO_TARGET_DIR:-target}/debug"
    ;;
full)
    # The same flags and profile as cargo-fuzz's: `cargo fuzz run` reuses this build.
    RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 --cfg fuzzing -Cdebug-assertions -Ccodegen-units=1" \
        cargo build --release --locked --quiet --target "$HOST" --bins \
        --config 'profile.release.debug="line-tables-only"'
    BIN="${CARGO_TARGET_DIR:-target}/$HOST/release"
    ;;
*)
    echo "fuzz-smoke: FUZZ_BUILD must be quick or full, not $BUILD" >&2
    exit 2
    ;;
esac
echo "fuzz-smoke: built the targets ($BUILD) in $(( $(date +%s) - build_start ))s"
if [ "${1:-}" = --build-only ]; then
    exit 0
fi
if [ -n "${FUZZ_LOG_DIR:-}" ]; then
    LOGS=$FUZZ_LOG_DIR
    mkdir -p "$LOGS"
else
    LOGS=$(mktemp -d)
    trap 'rm -rf "$LOGS"' EXIT
fi

run_one() {
    local t=$1
    mkdir -p "corpus/$t" "artifacts/$t" "seeds/$t"
    # stdin from /dev/null: nothing a target does may wait for a terminal.
    local rc=0 dict=()
    if [ -f "dicts/$t.dict" ]; then dict=(-dict="dicts/$t.dict"); fi
    "$BIN/$t" "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$MAX_LEN" -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
        "corpus/$t" "seeds/$t" </dev/null >"$LOGS/$t.log" 2>&1 || rc=$?
    echo "$rc" >"$LOGS/$t.rc"
}

running=0
for t in $TARGETS; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

failed=0
printf '%-22s %12s %8s\n' target executions crashes
for t in $TARGETS; do
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOGS/$t.log" | tail -1)
    rc=$(cat "$LOGS/$t.rc" 2>/dev/null || echo 1)
    crashes=0
    if [ "$rc" != 0 ]; then
        crashes=1
        failed=1
    fi
    printf '%-22s %12s %8s\n' "$t" "${execs:-?}" "$crashes"
    if [ "$rc" != 0 ]; then
        echo "--- $t (exit $rc): end of log ---"
        tail -40 "$LOGS/$t.log"
        ls "artifacts/$t/" || true
    fi
done
if [ "$failed" != 0 ]; then
    echo "fuzz-smoke: FAILED (reproduce with $BIN/<target> artifacts/<target>/<file>)"
    exit 1
fi
echo "fuzz-smoke: ok"
