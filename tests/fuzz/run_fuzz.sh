#!/bin/bash
# run_fuzz.sh BINARY CORPUS_DIR WORK_DIR SECONDS - one bounded libFuzzer run (the ctest entry of
# a fuzz target, and what scripts/fuzz.sh runs).
#
# The checked-in corpus CORPUS_DIR is only read: it is copied to WORK_DIR/corpus, which the
# fuzzer grows (scripts/fuzz.sh --merge folds that back into the repository). A crash, leak,
# sanitizer report or timeout (5 s per input) makes the run fail; the input that caused it is
# written to WORK_DIR/artifacts/ and named in the output. The full libFuzzer log is
# WORK_DIR/fuzz.log; the last lines (final statistics, or the report) are printed.
# Exit status: libFuzzer's (0 when nothing was found), 2 for a usage error.
set -u
if [ $# -ne 4 ]; then
    echo "usage: run_fuzz.sh BINARY CORPUS_DIR WORK_DIR SECONDS" >&2
    exit 2
fi
bin=$1 src=$2 work=$3 secs=$4
name=$(basename "$bin")
if [ ! -x "$bin" ] || [ ! -d "$src" ]; then
    echo "run_fuzz.sh: $bin is not executable or $src is not a directory" >&2
    exit 2
fi
rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts" || exit 2
cp -a "$src/." "$work/corpus/" || exit 2
before=$(ls "$work/artifacts" | wc -l)

# detect_leaks: pagefs_options_clear() and friends must free everything; a leak is a failure.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
"$bin" -max_total_time="$secs" -timeout=5 -rss_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?

if [ "$rc" -eq 0 ]; then
    # "#N DONE cov: C ft: F corp: ..." and the final stats: what the run achieved.
    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/fuzz.log"
    echo "$name: ${secs}s, corpus $(ls "$src" | wc -l) seeds -> $(ls "$work/corpus" | wc -l) inputs, no findings"
else
    tail -n 80 "$work/fuzz.log"
    echo "$name: FAILED (exit $rc); full log $work/fuzz.log"
    after=$(ls "$work/artifacts" | wc -l)
    if [ "$after" -gt "$before" ]; then
        ls -t "$work/artifacts" | head -n $((after - before)) | sed "s|^|$name: reproducer: $work/artifacts/|"
    fi
fi
exit "$rc"
