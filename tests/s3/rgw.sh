#!/bin/bash
# rgw.sh - a throwaway single-node Ceph cluster with radosgw, for the S3 tests.
#
#   rgw.sh start STATEDIR   bring up mon + memstore OSD + radosgw on 127.0.0.1, create the
#                           test S3 user, wait until a signed request succeeds, then write
#                           STATEDIR/env (sh-sourceable: PAGEFS_TEST_S3_ENDPOINT,
#                           AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
#                           PAGEFS_TEST_RGW_DIR).
#   rgw.sh stop STATEDIR    stop radosgw, then the OSD, then the mon (by the pids this script
#                           recorded), waiting for each, then remove STATEDIR.
#
# Design: everything (ceph.conf, keyring, mon store, OSD dir, logs, pid files, admin sockets)
# lives under STATEDIR and every ceph command gets `-c STATEDIR/ceph.conf`, so nothing touches
# /etc/ceph or /var/lib/ceph. Auth is `none`, the OSD uses memstore (data in RAM), messenger v2
# only, on free loopback ports. No ceph-mgr. Each daemon runs in the foreground (-f) of its own
# session with stdio sent to files, so a caller that waits on our stdout (ctest) does not hang,
# and $! is the daemon's pid, written to STATEDIR/pids/NAME.
# A start over a stale STATEDIR first stops whatever that run recorded (a recorded pid is only
# signalled if its command line still names STATEDIR, so a recycled pid is never hit).
# The test keys below are fixed, throwaway, and only valid for this local cluster.
set -u

ACCESS_KEY=PAGEFSTESTACCESSKEY01
SECRET_KEY=pagefsTestSecretKey0000000000000000000001
REGION=us-east-1
READY_TIMEOUT=${PAGEFS_RGW_TIMEOUT:-60}

die() {
    echo "rgw.sh: $*" >&2
    exit 1
}

usage() {
    echo "usage: rgw.sh start|stop STATEDIR" >&2
    exit 2
}

# A free TCP port on 127.0.0.1 (the kernel picks it; the small race until the daemon binds it
# is acceptable for a test fixture).
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# pid_alive PID DIR: the process exists and its command line mentions DIR.
pid_alive() {
    local pid=$1 dir=$2
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir"
}

# stop_one NAME DIR: TERM the recorded daemon, wait up to 20 s, then KILL.
stop_one() {
    local name=$1 dir=$2 pidfile="$2/pids/$1" pid i
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if [ -n "$pid" ] && pid_alive "$pid" "$dir"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < 200; i++)); do
            pid_alive "$pid" "$dir" || break
            sleep 0.1
        done
        if pid_alive "$pid" "$dir"; then
            echo "rgw.sh: $name (pid $pid) did not stop on TERM, killing" >&2
            kill -KILL "$pid" 2>/dev/null
            for ((i = 0; i < 50; i++)); do
                pid_alive "$pid" "$dir" || break
                sleep 0.1
            done
        fi
    fi
    rm -f "$pidfile"
}

do_stop() {
    local dir=$1
    [ -d "$dir" ] || return 0
    if [ ! -e "$dir/.pagefs-rgw" ] && [ -n "$(ls -A "$dir")" ]; then
        die "$dir exists and was not made by rgw.sh; not touching it"
    fi
    stop_one radosgw "$dir"
    stop_one osd "$dir"
    stop_one mon "$dir"
    rm -rf "$dir"
}

# spawn NAME CMD...: run a daemon in the foreground of its own session, stdio to files.
spawn() {
    local name=$1
    shift
    setsid "$@" </dev/null >"$STATE/log/$name.out" 2>&1 &
    echo $! >"$STATE/pids/$name"
}

ceph_cli() {
    timeout 30 ceph -c "$CONF" --connect-timeout 20 "$@"
}

# A signed S3 request (ListBuckets) with the test keys; prints the HTTP status.
signed_status() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
        --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
        -H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' \
        "http://127.0.0.1:$RGW_PORT/" 2>/dev/null
}

fail_start() {
    echo "rgw.sh: $*" >&2
    for f in "$STATE"/log/*.out "$STATE"/log/*.log; do
        [ -s "$f" ] || continue
        echo "---- tail of $f" >&2
        tail -n 15 "$f" >&2
    done
    do_stop "$STATE"
    exit 1
}

do_start() {
    local t0 fsid osd_uuid osd_id i code

    t0=$(date +%s.%N)
    for bin in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool curl; do
        command -v "$bin" >/dev/null || die "$bin not found (install ceph-mon ceph-osd radosgw ceph-common curl)"
    done
    [ -x /usr/bin/python3 ] || die "/usr/bin/python3 not found"

    do_stop "$STATE" # a stale state dir from an earlier run
    mkdir -p "$STATE" && touch "$STATE/.pagefs-rgw" || die "cannot create $STATE"
    mkdir -p "$STATE"/{pids,log,run,mon.a,osd.0,rgw.a} || die "cannot create $STATE"
    CONF=$STATE/ceph.conf
    MON_PORT=$(free_port) || die "no free port"
    RGW_PORT=$(free_port) || die "no free port"
    while [ "$RGW_PORT" = "$MON_PORT" ]; do RGW_PORT=$(free_port); done
    fsid=$(cat /proc/sys/kernel/random/uuid)
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)

    cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$MON_PORT]
mon_initial_members = a
public_addr = 127.0.0.1
ms_bind_msgr1 = false
ms_bind_msgr2 = true
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
auth_allow_insecure_global_id_reclaim = true
keyring = $STATE/keyring
run_dir = $STATE/run
admin_socket = $STATE/run/\$name.asok
pid_file = $STATE/run/\$name.pid
log_file = $STATE/log/\$name.log
mon_cluster_log_file = $STATE/log/cluster.log
log_to_stderr = false
err_to_stderr = true
crash_dir = $STATE/crash
exporter_sock_dir = $STATE/run
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_max_pg_per_osd = 1000
mon_warn_on_pool_no_redundancy = false

[mon]
mon_data = $STATE/mon.\$id
paxos_propose_interval = 0.05
mon_osd_min_up_ratio = 0
mon_osd_min_in_ratio = 0

[osd]
osd_data = $STATE/osd.\$id
osd_objectstore = memstore
memstore_device_bytes = 8589934592
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 2

[client]
ms_mon_client_mode = crc secure
rgw_data = $STATE/rgw.\$id
rgw_frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw_gc_obj_min_wait = 30
rgw_gc_processor_period = 30
rgw_gc_processor_max_time = 30
rgw_dns_name = localhost
rgw_enable_usage_log = false
rgw_thread_pool_size = 128
debug_rgw = 1
EOF

    # The mon store, from a one-monitor monmap.
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_PORT]" \
        "$STATE/monmap" >"$STATE/log/monmaptool.out" 2>&1 || fail_start "monmaptool failed"
    ceph-authtool --create-keyring "$STATE/keyring" --gen-key -n mon. --cap mon 'allow *' \
        >"$STATE/log/authtool.out" 2>&1 || fail_start "ceph-authtool failed"
    ceph-mon -c "$CONF" --mkfs -i a --monmap "$STATE/monmap" --keyring "$STATE/keyring" \
        >"$STATE/log/mon-mkfs.out" 2>&1 || fail_start "ceph-mon --mkfs failed"
    spawn mon ceph-mon -f -c "$CONF" -i a

    # One OSD on memstore.
    osd_id=$(ceph_cli osd new "$osd_uuid" 2>"$STATE/log/osd-new.out") ||
        fail_start "ceph osd new failed (mon not answering?)"
    [ "$osd_id" = 0 ] || fail_start "unexpected osd id '$osd_id'"
    ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" \
        >"$STATE/log/osd-mkfs.out" 2>&1 || fail_start "ceph-osd --mkfs failed"
    spawn osd ceph-osd -f -c "$CONF" -i 0

    # radosgw creates its pools and default zone on first start.
    spawn radosgw radosgw -f -c "$CONF" -n client.rgw.a

    # Wait for the gateway to answer HTTP at all, then create the user, then wait for a
    # signed request to succeed.
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
        pid_alive "$(cat "$STATE/pids/radosgw")" "$STATE" || fail_start "radosgw exited"
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$RGW_PORT/" 2>/dev/null)
        [ "$code" = 200 ] && break
        sleep 0.1
    done
    [ "$code" = 200 ] || fail_start "radosgw did not answer within ${READY_TIMEOUT}s"
    timeout 60 radosgw-admin -c "$CONF" -n client.admin user create --uid=pagefs-test \
        --display-name="pagefs test" --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" \
        >"$STATE/log/user-create.out" 2>&1 || fail_start "radosgw-admin user create failed"
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
        code=$(signed_status)
        [ "$code" = 200 ] && break
        sleep 0.1
    done
    [ "$code" = 200 ] || fail_start "signed request still fails (HTTP $code)"

    cat >"$STATE/env.tmp" <<EOF
PAGEFS_TEST_S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
AWS_ACCESS_KEY_ID=$ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$SECRET_KEY
AWS_REGION=$REGION
PAGEFS_TEST_RGW_DIR=$STATE
EOF
    mv "$STATE/env.tmp" "$STATE/env"
    echo "rgw.sh: radosgw ready at http://127.0.0.1:$RGW_PORT in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
}

[ $# -eq 2 ] || usage
case "$2" in
/*) STATE=$2 ;;
*) STATE=$(pwd)/$2 ;;
esac
STATE=${STATE%/}
[ -n "$STATE" ] && [ "$STATE" != / ] || die "refusing STATEDIR '$2'"

case "$1" in
start) do_start ;;
stop) do_stop "$STATE" ;;
*) usage ;;
esac
