#!/bin/bash
# test_rgw_restart.sh - rgw.sh starts radosgw again when the gateway exits before it answers.
#
# A `radosgw` first on PATH kills itself (SIGKILL, no output) on its first start and execs
# the real one after that, as the gateway once did in CI. The fixture must say how it exited,
# come up on the second start (a signed request, STS and the OIDC issuer checked as always),
# and stop without leaving a daemon behind. Usage: test_rgw_restart.sh SCRATCH_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
real=$(command -v radosgw) || { echo "radosgw not found" >&2; exit 1; }
mkdir -p "$1" || exit 1
work=$(mktemp -d "$1/rgw-restart.XXXXXX") || exit 1
trap '"$here/rgw.sh" stop "$work/state"; rm -rf "$work"' EXIT

mkdir "$work/bin"
cat >"$work/bin/radosgw" <<WRAP
#!/bin/bash
if [ ! -e "$work/started" ]; then
    : >"$work/started"
    kill -KILL \$\$
fi
exec "$real" "\$@"
WRAP
chmod +x "$work/bin/radosgw"

# rgw.sh's waits (for the gateway to answer, for a signed request) bounded at 30 s each, its
# words shown as they come.
PATH="$work/bin:$PATH" PAGEFS_RGW_TIMEOUT=30 "$here/rgw.sh" start "$work/state" 2>&1 |
    tee "$work/out"
rc=${PIPESTATUS[0]}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
[ "$rc" -eq 0 ] || fail "rgw.sh start exited $rc"
grep -q 'radosgw exited (killed by signal 9); starting it again' "$work/out" ||
    fail "no word of the first gateway's exit"
grep -q 'radosgw ready at' "$work/out" || fail "not ready"
[ -s "$work/state/env" ] || fail "no env file"
gw=$(cat "$work/state/pids/radosgw")
"$here/rgw.sh" stop "$work/state" || fail "rgw.sh stop failed"
# Gone, or a zombie its new parent has not reaped yet (its command line is empty then).
if { tr '\0' ' ' <"/proc/$gw/cmdline"; } 2>/dev/null | grep -qF -- "$work/state"; then
    fail "radosgw (pid $gw) still runs after stop"
fi
echo "PASS"
