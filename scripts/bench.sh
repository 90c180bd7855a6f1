#!/usr/bin/env bash
# bench.sh [bench.py options] - installs what the benchmarks need (peers s3fs and rclone, fio,
# python3-torch, matplotlib, radosgw), builds pagefs and the shaper, and runs the benchmark
# harness (tools/bench/bench.py). Its defaults: the quick size through the `cloud` profile, 3 runs,
# pagefs, s3fs and rclone side by side, results in docs/benchmarks/<date>-quick-cloud/.
#   scripts/bench.sh --size full --runs 3        the full size (hours; see docs/benchmarks)
#   scripts/bench.sh --profile loopback          no link shaping
#   scripts/bench.sh --links --size full         large files through the near, cloud and far
#                                                links (issue 18's read-ahead targets)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh" --bench
# As released: no invariant checks (scripts/test.sh turns them on in the same directory).
cmake -S "$here" -B "$here/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEFS_INVARIANTS=OFF \
  >/dev/null
cmake --build "$here/build" -j"$(nproc)"
exec /usr/bin/python3 "$here/tools/bench/bench.py" --build "$here/build" "$@"
