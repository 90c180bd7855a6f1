#!/usr/bin/env bash
# test.sh - installs everything the tests need, builds, and runs the whole default suite
# (unit, component, file:// and radosgw-backed s3:// mount tests) under ctest.
#   scripts/test.sh                 the default suite
#   PAGEFS_SANITIZE=asan scripts/test.sh   the same suite under ASan+UBSan (tsan: TSan)
#   CTEST_ARGS="-L unit" scripts/test.sh   a subset, by ctest label
# After the suite, scripts/fuzz.sh runs every libFuzzer target for 20 s (skipped for a subset).
# The benchmark smoke test (label bench) is left out; scripts/bench.sh runs the benchmarks.
# The long reliability runs (label soak) are left out too: CTEST_ARGS="-L soak" runs them.
# So is the demo on a debootstrapped fresh Debian (label fresh): `cd build && ctest -L fresh`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh" --test
build="$here/build"
# Optimised as released, plus every module's invariant checks (backends/invariants.h), which a
# plain release build compiles out: the suite exercises them (tests/cache/test_invariants).
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEFS_WERROR=ON -DPAGEFS_INVARIANTS=ON)
case "${PAGEFS_SANITIZE:-}" in
  asan) build="$here/build-asan"; flags+=(-DPAGEFS_ASAN=ON) ;;
  tsan) build="$here/build-tsan"; flags+=(-DPAGEFS_TSAN=ON) ;;
  "") ;;
  *) echo "test.sh: PAGEFS_SANITIZE must be asan or tsan" >&2; exit 2 ;;
esac
cmake -S "$here" -B "$build" "${flags[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# shellcheck disable=SC2086
ctest --output-on-failure -j2 -LE 'bench|soak|fresh' ${CTEST_ARGS:-}
# Then every libFuzzer target for a fixed 20 s (Clang, build-fuzz; tests/fuzz). Not for a
# subset run (CTEST_ARGS given).
if [ -z "${CTEST_ARGS:-}" ]; then
  "$here/scripts/fuzz.sh" --time 20
fi
