#!/bin/bash
# rgw.sh - a throwaway single-node Ceph cluster with radosgw, for the S3 tests.
#
#   rgw.sh start STATEDIR   bring up mon + memstore OSD + radosgw on 127.0.0.1, create the
#                           test S3 user, wait until a signed request succeeds, set up STS
#                           (below), then write STATEDIR/env (sh-sourceable:
#                           PAGEFS_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                           AWS_REGION, PAGEFS_TEST_RGW_DIR, and the PAGEFS_TEST_STS_* and
#                           PAGEFS_TEST_OIDC_* variables of the STS setup).
#   rgw.sh stop STATEDIR    stop the OIDC issuer, radosgw, then the OSD, then the mon (by the
#                           pids this script recorded), waiting for each, then remove STATEDIR.
#
# STS: radosgw runs with its STS on (rgw_s3_auth_use_sts, a fixed rgw_sts_key). The test user
# has the caps roles=* and oidc-provider=*, so the roles and the OIDC provider are made with
# radosgw's IAM API (signed curl POSTs, much faster than more radosgw-admin runs). Two roles
# exist, both allowed s3:* on every bucket (their permission policy "s3all"):
#   - STS_ROLE (PAGEFS_TEST_STS_ROLE_ARN), which the test user may assume (AssumeRole); its
#     trust policy also lets the session "chain" of that role assume it again, so a test can
#     call AssumeRole with temporary (session-token) source credentials;
#   - WEB_ROLE (PAGEFS_TEST_STS_WEB_ROLE_ARN), assumable with AssumeRoleWithWebIdentity by
#     tokens of a local OpenID Connect issuer: a loopback python3 http.server
#     (PAGEFS_TEST_OIDC_ISSUER) serving STATEDIR/oidc: /.well-known/openid-configuration and
#     a JWKS whose key carries its self-signed certificate in x5c, which is how radosgw 16.2
#     finds the key that signed a token (it follows jwks_uri and reads x5c only, over plain
#     http too). The issuer is registered with IAM CreateOpenIDConnectProvider (client id
#     PAGEFS_TEST_OIDC_CLIENT_ID, the certificate's SHA-1 thumbprint). A test signs its own
#     tokens (RS256, header kid PAGEFS_TEST_OIDC_KID) with the private key
#     PAGEFS_TEST_OIDC_KEY.
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
STS_KEY=pagefsStsKey0001 # rgw_sts_key: 16 characters, encrypts radosgw's session tokens
STS_ROLE=pagefs-reader
WEB_ROLE=pagefs-web
OIDC_CLIENT_ID=pagefs-test-client
OIDC_KID=pagefs-test-key
S3ALL_POLICY='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::*"]}]}'
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
    { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$dir"
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
    stop_one oidc "$dir"
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

# make_oidc_issuer ISSUER_URL: the OIDC issuer's files under STATEDIR/oidc: an RSA key and its
# self-signed certificate, the JWKS carrying the certificate in x5c, the discovery document.
# Prints the certificate's SHA-1 thumbprint (lower-case hex).
make_oidc_issuer() {
    local dir=$STATE/oidc issuer=$1 x5c
    mkdir -p "$dir/.well-known" || return 1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" \
        -days 7 -subj /CN=pagefs-test-oidc >"$STATE/log/oidc-openssl.out" 2>&1 || return 1
    x5c=$(openssl x509 -in "$dir/cert.pem" -outform DER | base64 -w0) || return 1
    printf '{"keys":[{"kty":"RSA","use":"sig","alg":"RS256","kid":"%s","x5c":["%s"]}]}\n' \
        "$OIDC_KID" "$x5c" >"$dir/jwks.json" || return 1
    printf '{"issuer":"%s","jwks_uri":"%s/jwks.json","id_token_signing_alg_values_supported":["RS256"]}\n' \
        "$issuer" "$issuer" >"$dir/.well-known/openid-configuration" || return 1
    openssl x509 -in "$dir/cert.pem" -noout -fingerprint -sha1 | sed 's/.*=//; s/://g' |
        tr 'A-F' 'a-f'
}

# signed_post SERVICE NAME=VALUE...: a form POST to radosgw's IAM or STS API signed with the
# test user's keys (values form-encoded by curl); the reply goes to STATEDIR/log/NAME.xml, where
# NAME is the first pair's value (the Action), except an STS success (it holds credentials).
# Returns 0 on HTTP 200, else prints the reply.
signed_post() {
    local service=$1 out="$STATE/log/${2#*=}.xml" code
    shift
    local args=()
    for kv in "$@"; do args+=(--data-urlencode "$kv"); done
    code=$(curl -s -o "$out" -w '%{http_code}' --max-time 10 \
        --aws-sigv4 "aws:amz:$REGION:$service" --user "$ACCESS_KEY:$SECRET_KEY" \
        -H 'Content-Type: application/x-www-form-urlencoded' "${args[@]}" \
        "http://127.0.0.1:$RGW_PORT/" 2>/dev/null)
    if [ "$code" = 200 ]; then
        [ "$service" != sts ] || rm -f "$out"
        return 0
    fi
    echo "rgw.sh: $service ${1#*=}: HTTP $code: $(head -c 300 "$out" 2>/dev/null)" >&2
    return 1
}

# make_role NAME TRUST_POLICY: create the role and give it S3ALL_POLICY.
make_role() {
    signed_post iam Action=CreateRole "RoleName=$1" "AssumeRolePolicyDocument=$2" &&
        signed_post iam Action=PutRolePolicy "RoleName=$1" PolicyName=s3all \
            "PolicyDocument=$S3ALL_POLICY"
}

# gw_exit: reap the gateway that exited (a child of this shell) and set GW_STATUS to how.
gw_exit() {
    local st
    wait "$(cat "$STATE/pids/radosgw")" 2>/dev/null
    st=$?
    if [ "$st" -eq 127 ]; then
        GW_STATUS="(status unknown)"
    elif [ "$st" -gt 128 ]; then
        GW_STATUS="(killed by signal $((st - 128)))"
    else
        GW_STATUS="(status $st)"
    fi
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
    local t0 fsid osd_uuid osd_id code oidc_port oidc_pid issuer thumbprint gw_tries deadline

    t0=$(date +%s.%N)
    for bin in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool curl openssl; do
        command -v "$bin" >/dev/null || die "$bin not found (install ceph-mon ceph-osd radosgw ceph-common curl openssl)"
    done
    [ -x /usr/bin/python3 ] || die "/usr/bin/python3 not found"

    do_stop "$STATE" # a stale state dir from an earlier run
    mkdir -p "$STATE" && touch "$STATE/.pagefs-rgw" || die "cannot create $STATE"
    mkdir -p "$STATE"/{pids,log,run,mon.a,osd.0,rgw.a} || die "cannot create $STATE"
    CONF=$STATE/ceph.conf
    MON_PORT=$(free_port) || die "no free port"
    RGW_PORT=$(free_port) || die "no free port"
    while [ "$RGW_PORT" = "$MON_PORT" ]; do RGW_PORT=$(free_port); done
    oidc_port=$(free_port) || die "no free port"
    while [ "$oidc_port" = "$MON_PORT" ] || [ "$oidc_port" = "$RGW_PORT" ]; do
        oidc_port=$(free_port)
    done
    issuer=http://127.0.0.1:$oidc_port
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
rgw_s3_auth_use_sts = true
rgw_sts_key = $STS_KEY
EOF

    # The OIDC issuer's files, made while the cluster starts (an RSA key takes a moment).
    make_oidc_issuer "$issuer" >"$STATE/oidc-thumbprint" &
    oidc_pid=$!

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
    gw_tries=1

    wait "$oidc_pid" && thumbprint=$(cat "$STATE/oidc-thumbprint") && [ -n "$thumbprint" ] ||
        fail_start "cannot make the OIDC issuer's key and certificate"
    spawn oidc /usr/bin/python3 -m http.server "$oidc_port" --bind 127.0.0.1 \
        --directory "$STATE/oidc"

    # Wait for the gateway to answer HTTP at all, then create the user, then wait for a
    # signed request to succeed.
    # A gateway that exits before it answers is started again (up to 3 times, each on a new
    # port: the free port may have been taken meanwhile). Once, in CI, radosgw exited within a
    # fraction of a second without a word in its log or on stderr; its exit status is printed.
    # Each wait is bounded in time (bash's SECONDS), not in tries: a gateway that accepts
    # connections and does not answer makes each curl take its --max-time.
    deadline=$((SECONDS + READY_TIMEOUT))
    code=
    while ((SECONDS < deadline)); do
        if ! pid_alive "$(cat "$STATE/pids/radosgw")" "$STATE"; then
            gw_exit
            [ "$gw_tries" -lt 3 ] || fail_start "radosgw exited $GW_STATUS (3 starts)"
            echo "rgw.sh: radosgw exited $GW_STATUS; starting it again" >&2
            for f in "$STATE/log/radosgw.out" "$STATE/log/client.rgw.a.log"; do
                [ -s "$f" ] && tail -n 5 "$f" >&2
            done
            RGW_PORT=$(free_port) || fail_start "no free port"
            sed -i "s/^rgw_frontends = .*/rgw_frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1/" \
                "$CONF" || fail_start "cannot rewrite $CONF"
            spawn radosgw radosgw -f -c "$CONF" -n client.rgw.a
            gw_tries=$((gw_tries + 1))
            deadline=$((SECONDS + READY_TIMEOUT))
            continue
        fi
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$RGW_PORT/" 2>/dev/null)
        [ "$code" = 200 ] && break
        sleep 0.1
    done
    [ "$code" = 200 ] || fail_start "radosgw did not answer within ${READY_TIMEOUT}s"
    timeout 60 radosgw-admin -c "$CONF" -n client.admin user create --uid=pagefs-test \
        --display-name="pagefs test" --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" \
        --caps="roles=*;oidc-provider=*" \
        >"$STATE/log/user-create.out" 2>&1 || fail_start "radosgw-admin user create failed"
    deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        code=$(signed_status)
        [ "$code" = 200 ] && break
        sleep 0.1
    done
    [ "$code" = 200 ] || fail_start "signed request still fails (HTTP $code)"

    # The roles; the issuer, registered (its provider ARN is its URL without the scheme);
    # then proof that STS answers (one AssumeRole) and the issuer too.
    make_role "$STS_ROLE" '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/pagefs-test","arn:aws:sts:::assumed-role/'"$STS_ROLE"'/chain"]},"Action":["sts:AssumeRole"]}]}' ||
        fail_start "cannot create role $STS_ROLE"
    make_role "$WEB_ROLE" '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":["arn:aws:iam:::oidc-provider/127.0.0.1:'"$oidc_port"'"]},"Action":["sts:AssumeRoleWithWebIdentity"]}]}' ||
        fail_start "cannot create role $WEB_ROLE"
    signed_post iam Action=CreateOpenIDConnectProvider "Url=$issuer" \
        "ClientIDList.member.1=$OIDC_CLIENT_ID" "ThumbprintList.member.1=$thumbprint" ||
        fail_start "cannot register the OIDC provider $issuer"
    signed_post sts Action=AssumeRole Version=2011-06-15 \
        "RoleArn=arn:aws:iam:::role/$STS_ROLE" RoleSessionName=rgw-sh DurationSeconds=900 ||
        fail_start "STS AssumeRole of $STS_ROLE fails"
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$issuer/jwks.json")
    [ "$code" = 200 ] || fail_start "the OIDC issuer at $issuer does not answer (HTTP $code)"

    cat >"$STATE/env.tmp" <<EOF
PAGEFS_TEST_S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
AWS_ACCESS_KEY_ID=$ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$SECRET_KEY
AWS_REGION=$REGION
PAGEFS_TEST_RGW_DIR=$STATE
PAGEFS_TEST_STS_ENDPOINT=http://127.0.0.1:$RGW_PORT
PAGEFS_TEST_STS_ROLE_ARN=arn:aws:iam:::role/$STS_ROLE
PAGEFS_TEST_STS_WEB_ROLE_ARN=arn:aws:iam:::role/$WEB_ROLE
PAGEFS_TEST_OIDC_ISSUER=$issuer
PAGEFS_TEST_OIDC_KEY=$STATE/oidc/key.pem
PAGEFS_TEST_OIDC_KID=$OIDC_KID
PAGEFS_TEST_OIDC_CLIENT_ID=$OIDC_CLIENT_ID
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
