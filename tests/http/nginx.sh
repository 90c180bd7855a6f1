#!/usr/bin/env bash
# nginx.sh start|stop DIR - a throwaway nginx (Debian's nginx-light) on a free loopback port
# serving DIR/www with `autoindex on` (exact sizes, UTC times: nginx's defaults), for the
# http(s) backend tests (the ctest fixture `nginx`).
#   start: generates the test tree DIR/www/tree (make_tree.py), writes DIR/nginx.conf, starts
#          nginx (its pid, logs and temp files under DIR) and writes DIR/env:
#            PORT=...  TLS_PORT=... (https, self-signed)  WWW=DIR/www
#            URL=http://127.0.0.1:PORT/tree/
#   stop:  stops that nginx (by its pid file) and removes DIR/www.
# Runs as root (then nginx's workers stay root: the tree is under the build directory).
set -euo pipefail
cmd=${1:?usage: nginx.sh start|stop DIR}
dir=${2:?usage: nginx.sh start|stop DIR}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3

stop_nginx() {
  if [ -s "$dir/nginx.pid" ]; then
    pid=$(cat "$dir/nginx.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -QUIT "$pid" || true
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
    fi
    rm -f "$dir/nginx.pid"
  fi
}

case "$cmd" in
start)
  if ! command -v nginx >/dev/null; then
    echo "nginx.sh: nginx is not installed (scripts/install-deps.sh --test)" >&2
    exit 1
  fi
  stop_nginx
  rm -rf "$dir/www"
  mkdir -p "$dir/www/tree" "$dir/tmp"
  "$py" "$here/make_tree.py" "$dir/www/tree"
  free_port='import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
  port=$("$py" -c "$free_port")
  tls_port=$("$py" -c "$free_port")
  # A self-signed certificate: https sources must be refused (certificates are verified).
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
    -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
  user_line=""
  if [ "$(id -u)" -eq 0 ]; then
    user_line="user root;"
  fi
  cat > "$dir/nginx.conf" <<CONF
$user_line
daemon on;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 512; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    types { text/html html; text/plain txt; }
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    server {
        listen 127.0.0.1:$port;
        root $dir/www;
        location / { autoindex on; }
        # The tree again at 1 MB/s a connection: reads that are still under way when cut.
        location /slow/ { alias $dir/www/; limit_rate 1m; }
    }
    server {
        listen 127.0.0.1:$tls_port ssl;
        ssl_certificate $dir/tls.crt;
        ssl_certificate_key $dir/tls.key;
        root $dir/www;
        location / { autoindex on; }
    }
}
CONF
  nginx -c "$dir/nginx.conf" -p "$dir" -e "$dir/error.log"
  for _ in $(seq 100); do
    if "$py" -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),1)" 2>/dev/null; then
      printf 'PORT=%s\nTLS_PORT=%s\nWWW=%s\nURL=http://127.0.0.1:%s/tree/\n' \
        "$port" "$tls_port" "$dir/www" "$port" > "$dir/env"
      exit 0
    fi
    sleep 0.1
  done
  echo "nginx.sh: nginx did not listen on 127.0.0.1:$port; see $dir/error.log" >&2
  stop_nginx
  exit 1
  ;;
stop)
  stop_nginx
  rm -rf "$dir/www" "$dir/env" "$dir/tls.key" "$dir/tls.crt"
  ;;
*)
  echo "usage: nginx.sh start|stop DIR" >&2
  exit 2
  ;;
esac
