#!/usr/bin/env bash
# demo.sh - the main job on a fresh machine: install what is missing, build, mount the sample
# tree shipped in the repo (sample/imagenet-mini) from file://, list it, read every file and
# check it against the source, unmount and mount again on the same cache, read everything
# again (now from the local cache), show the daemon's counters (`pagefs stats`), unmount, and
# end with a table of both passes: files read, bytes from the store, bytes from the cache,
# hit ratio and time.
#   PAGEFS_DEMO_SOURCE=s3://bucket/prefix PAGEFS_DEMO_OPTS=endpoint=... scripts/demo.sh
# mounts another source instead.
#   PAGEFS_BUILD_DIR=DIR scripts/demo.sh
# builds in (and runs pagefs from) DIR instead of ./build; DIR is configured only when it has
# no CMakeCache.txt yet, so an existing build keeps its type and options.
# Needs only what scripts/install-deps.sh installs without flags on top of a minimal Debian 12
# (tests/deploy/test_demo.py checks that with a PATH holding nothing else).
set -euo pipefail
shopt -s inherit_errexit
here=$(cd "$(dirname "$0")/.." && pwd)
build="${PAGEFS_BUILD_DIR:-$here/build}"
"$here/scripts/install-deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target pagefs
pagefs="$build/pagefs"

source="${PAGEFS_DEMO_SOURCE:-file://$here/sample/imagenet-mini}"
work=$(mktemp -d /tmp/pagefs-demo.XXXXXX)
mnt="$work/mnt"
mkdir -p "$mnt"
opts="cache_dir=$work/cache,cache_size=64M${PAGEFS_DEMO_OPTS:+,$PAGEFS_DEMO_OPTS}"
cleanup() {
  fusermount3 -u "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The counters a pass row needs, one a line (pagefs stats --get: no JSON parser needed).
counters="cache.hit_pages,cache.miss_pages,remote.bytes,cache.hit_bytes"
snapshot() { # FILE
  "$pagefs" stats "$mnt" --get "$counters" > "$1"
}
human() { # BYTES
  awk -v b="$1" 'BEGIN { split("B KiB MiB GiB TiB", u, " "); i = 1
    while (b >= 1024 && i < 5) { b /= 1024; i++ }
    if (i == 1) printf "%d B", b; else printf "%.1f %s", b, u[i] }'
}

# The daemon serving $mnt: `pagefs mount` forks it into the background.
daemon_pid() {
  local d
  for d in /proc/[0-9]*; do
    if [ "$d/exe" -ef "$pagefs" ] &&
      tr '\0' '\n' < "$d/cmdline" 2>/dev/null | grep -qxF -- "$mnt"; then
      echo "${d#/proc/}"
    fi
  done
}
# Unmounts and waits for the daemon to finish writing its cache and exit (a new daemon on the
# same cache directory must not start before that). An exited daemon may stay a zombie until
# init reaps it: its state in /proc/PID/stat is then Z.
unmount() {
  local pids pid state tries=0
  pids=$(daemon_pid)
  if [ -z "$pids" ]; then
    echo "demo: found no pagefs daemon serving $mnt in /proc" >&2
    return 1
  fi
  fusermount3 -u "$mnt"
  for pid in $pids; do
    while read -r _ _ state _ 2>/dev/null < "/proc/$pid/stat" && [ "$state" != Z ]; do
      tries=$((tries + 1))
      if [ "$tries" -gt 200 ]; then
        echo "demo: the pagefs daemon ($pid) did not exit within 10 s of the unmount" >&2
        return 1
      fi
      sleep 0.05
    done
  done
}

rows=()
# Reads every file under the mount, keeps their sha256 in $work/passN and a table row made
# from the counters' growth during the pass.
read_pass() { # N LABEL
  local n=$1 label=$2 t0 t1 files hits misses store cached ratio secs
  snapshot "$work/before$n"
  t0=$(date +%s%N)
  (cd "$mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/pass$n"
  t1=$(date +%s%N)
  snapshot "$work/after$n"
  files=$(wc -l < "$work/pass$n")
  hits=$(grown "$n" 1)
  misses=$(grown "$n" 2)
  store=$(human "$(grown "$n" 3)")
  cached=$(human "$(grown "$n" 4)")
  if [ $((hits + misses)) -gt 0 ]; then
    ratio=$(awk -v h="$hits" -v m="$misses" 'BEGIN { printf "%.1f %%", 100 * h / (h + m) }')
  else
    ratio="--"
  fi
  secs=$(awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.3f s", ns / 1e9 }')
  # shellcheck disable=SC2059
  rows+=("$(printf "$row_format" "$label" "$files" "$store" "$cached" "$ratio" "$secs")")
}
grown() { # N I: how much the I-th counter of $counters grew during pass N
  local before after
  before=$(sed -n "$2p" "$work/before$1")
  after=$(sed -n "$2p" "$work/after$1")
  echo $((after - before))
}
row_format='%-16s %6s %12s %12s %10s %9s'

echo "== pagefs mount $source $mnt -o $opts"
"$pagefs" mount "$source" "$mnt" -o "$opts"
echo "== ls -lR"
ls -lR "$mnt"
echo "== read every file (first pass: from the source)"
read_pass 1 "1 first read"
echo "== unmount, mount again on the same cache directory (a new daemon, an empty kernel cache)"
unmount
"$pagefs" mount "$source" "$mnt" -o "$opts"
echo "== read every file again (second pass: from the local cache)"
read_pass 2 "2 after remount"
cmp "$work/pass1" "$work/pass2"
if [ -z "${PAGEFS_DEMO_SOURCE:-}" ]; then
  (cd "$here/sample/imagenet-mini" && find . -type f -print0 | sort -z | xargs -0 sha256sum) \
    > "$work/truth"
  cmp "$work/pass1" "$work/truth"
  echo "== all $(wc -l < "$work/truth") files byte-identical to the source, in both passes"
fi
echo "== pagefs stats $mnt (the second daemon's counters)"
"$pagefs" stats "$mnt"
echo "== unmount"
unmount
echo
# shellcheck disable=SC2059
printf "$row_format\n" pass files "from store" "from cache" "hit ratio" time
printf '%s\n' "${rows[@]}"
echo "(from store: fetched from the source; from cache: served from the local page cache. A page"
echo " that read-ahead fetched before the reader asked counts once as a miss and once as a hit.)"
echo "demo: OK"
