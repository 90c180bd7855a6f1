#!/usr/bin/env bash
# install-deps.sh [--test] - installs the Debian 12 packages pagefs needs, if any are missing.
#   (no flag)  what building and running pagefs needs
#   --test     also what the test suite needs (radosgw, awscli, boto3, ...)
#   --bench    also what the benchmarks need (the test set, which has the peers s3fs and
#              rclone, fio, torch, bindfs)
# Runs apt-get only when something is missing, so it is quick on a machine that has it all.
set -euo pipefail

build_pkgs=(
  build-essential cmake pkg-config   # compiler and build system
  fuse3 libfuse3-dev                 # the FUSE low-level API and fusermount3
  libcurl4-openssl-dev               # HTTP(S) client with built-in AWS SigV4 signing
  libuv1-dev                         # thread pool and event loop for the prefetcher
  libsqlite3-dev                     # the cache index
  libzstd-dev                        # optional page compression
  libexpat1-dev                      # S3 XML replies
  libxxhash-dev                      # page checksums (XXH3)
  libssl-dev                         # libcrypto: SHA-256 for file ids and payload hashes
  libjson-c-dev                      # JSON output of the tools (never built by string pasting)
  libmicrohttpd-dev                  # the daemon's REST API, /metrics and control socket
  libhttp-parser-dev                 # HTTP/1.1 message boundaries in the link shaper
  libxml2-dev                        # HTML directory listings of http(s):// sources
)
test_pkgs=(
  ceph-mon ceph-osd radosgw ceph-common  # a real S3 server (Ceph radosgw) for the tests
  awscli python3-boto3                   # ground truth and test data uploads
  python3                                # /usr/bin/python3 drives the mount tests
  chromium chromium-driver python3-selenium  # the dashboard test: a real headless browser
  attr procps curl coreutils             # getfattr; pgrep; curl and timeout/setsid for rgw.sh
  python3-yaml systemd util-linux groff-base  # deploy tests: manifests, unit files, setpriv, man page
  prometheus                             # scrapes /metrics in the REST tests (format proof)
  nginx-light openssl                    # autoindex server (+ a self-signed TLS cert) for the http(s):// tests
  clang libclang-rt-14-dev               # libFuzzer targets (scripts/fuzz.sh, run by test.sh)
  etcd-server                            # the cluster membership tests start a real etcd (3.4)
  s3fs rclone                            # S3 API tests: both mount pagefs's S3 endpoint
)

bench_pkgs=(
  fio                                    # raw I/O patterns
  python3-torch python3-matplotlib       # the DataLoader workload; the chart
  bindfs                                 # the local copy through a plain FUSE pass-through
)

pkgs=("${build_pkgs[@]}")
case "${1:-}" in
  "") ;;
  --test) pkgs+=("${test_pkgs[@]}") ;;
  --bench) pkgs+=("${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "usage: install-deps.sh [--test|--bench]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
