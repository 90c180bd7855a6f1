#!/usr/bin/env bash
# test.sh - installs everything the tests need, builds, and runs the whole default suite
# (unit, component, file:// and radosgw-backed s3:// mount tests) under ctest.
#   scripts/test.sh                 the default suite
#   PAGEFS_SANITIZE=asan scripts/test.sh   the same suite under ASan+UBSan (tsan: TSan)
#   CTEST_ARGS="-L unit" scripts/test.sh   a subset, by ctest label
# The benchmark smoke test (label bench) is left out; scripts/bench.sh runs the benchmarks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh" --test
build="$here/build"
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEFS_WERROR=ON)
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
ctest --output-on-failure -j2 -LE bench ${CTEST_ARGS:-}
