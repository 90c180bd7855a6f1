#!/usr/bin/env bash
# fuzz.sh [--time SECONDS] [--merge] [TARGET...] - builds the libFuzzer targets with Clang
# (BUILD = build-fuzz, -DPAGEFS_FUZZ=ON: ASan + UBSan + libFuzzer) and runs each for a fixed
# time over a scratch copy of its checked-in seed corpus tests/fuzz/corpus/TARGET/.
#   scripts/fuzz.sh                       every target, 20 s each (what scripts/test.sh runs)
#   scripts/fuzz.sh --time 600 fuzz_s3_xml    a longer campaign on one target
#   scripts/fuzz.sh --time 300 --merge    ... then fold the inputs that add coverage back into
#                                         tests/fuzz/corpus/ (review and commit them)
# Targets whose parser has not landed are not built (tests/fuzz/CMakeLists.txt). Findings go
# to build-fuzz/fuzz/TARGET/artifacts/ and make the script fail; reproduce one with
#   build-fuzz/tests/fuzz/TARGET build-fuzz/fuzz/TARGET/artifacts/crash-...
# Needs clang and libclang-rt-14-dev (scripts/install-deps.sh --test).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=20
merge=0
want=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time)
      [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --time needs a number of seconds" >&2; exit 2; }
      secs=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) want+=("$1"); shift ;;
  esac
done
if ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang is missing (scripts/install-deps.sh --test installs it)" >&2
  exit 2
fi

build="$here/build-fuzz"
cmake -S "$here" -B "$build" -DCMAKE_C_COMPILER=clang -DPAGEFS_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target pagefs_fuzz_all -j"$(nproc)"

declare -A bins corpora
order=()
while read -r name bin corpus; do
  [ -n "$name" ] || continue
  bins[$name]=$bin
  corpora[$name]=$corpus
  order+=("$name")
done <"$build/fuzz/targets.txt"
if [ "${#want[@]}" -eq 0 ]; then
  want=("${order[@]}")
fi

failed=()
for t in "${want[@]}"; do
  if [ -z "${bins[$t]:-}" ]; then
    echo "fuzz.sh: no fuzz target '$t' (built: ${order[*]})" >&2
    exit 2
  fi
  echo "== $t (${secs}s)"
  if ! "$here/tests/fuzz/run_fuzz.sh" "${bins[$t]}" "${corpora[$t]}" "$build/fuzz/$t" "$secs"; then
    failed+=("$t")
    continue
  fi
  if [ "$merge" -eq 1 ]; then
    n0=$(ls "${corpora[$t]}" | wc -l)
    "${bins[$t]}" -merge=1 -timeout=5 -rss_limit_mb=1024 "${corpora[$t]}" \
      "$build/fuzz/$t/corpus" >"$build/fuzz/$t/merge.log" 2>&1
    echo "$t: corpus $n0 -> $(ls "${corpora[$t]}" | wc -l) inputs (merged)"
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: findings in ${failed[*]} (inputs under $build/fuzz/*/artifacts/)" >&2
  exit 1
fi
echo "fuzz.sh: ${#want[@]} targets, ${secs}s each, no findings"
