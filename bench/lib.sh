# Shared by the bench scripts (source it): a free loopback port, `haul serve` and nginx, timing and medians.
# Each script sets WORK (its scratch directory on the real disk) before calling these.

# Prints a free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_haul_serve LOG: starts `haul serve` on a port of its choosing, its output in LOG, and waits until it says
# which; sets HAUL_SERVE_PID and HAUL_SERVE_PORT.
start_haul_serve() {
    "$HAUL" serve --port 0 > "$1" 2>&1 &
    HAUL_SERVE_PID=$!
    for _ in $(seq 1 50); do grep -q 'Serving on' "$1" && break; sleep 0.1; done
    HAUL_SERVE_PORT=$(grep -o '127.0.0.1:[0-9]*' "$1" | head -1 | cut -d: -f2)
}

# small_files DIR COUNT: COUNT files of 4 KiB of random bytes in DIR (made if needed), named f00000, f00001, ...
small_files() {
    mkdir -p "$1"
    head -c $(($2 * 4096)) /dev/urandom > "$1.blob"
    split -b 4096 -a 5 -d "$1.blob" "$1/f"
    rm "$1.blob"
}

# start_nginx ROOT: serves ROOT on free loopback ports with sendfile and long keep-alive: plain HTTP on NGINX_PORT,
# and HTTPS with HTTP/2 offered by ALPN on NGINX_TLS_PORT, with a certificate for 127.0.0.1 from a CA made for the
# run. NGINX_CA is the bundle a client is told to trust: the system's CA certificates with the run's CA added, so
# that loading a trust store of the usual size counts as it does for a user. Stop it with stop_nginx (the scripts
# do so in their EXIT trap).
start_nginx() {
    NGINX_PORT=$(free_port)
    NGINX_TLS_PORT=$(free_port)
    NGINX_CA=$WORK/tls/bundle.pem
    make_certificates "$WORK/tls"
    cat /etc/ssl/certs/ca-certificates.crt "$WORK/tls/ca.pem" > "$NGINX_CA" 2>/dev/null || cp "$WORK/tls/ca.pem" "$NGINX_CA"
    cat > "$WORK/nginx.conf" <<CONF
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$NGINX_PORT; root $1; }
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
        ssl_certificate $WORK/tls/cert.pem;
        ssl_certificate_key $WORK/tls/key.pem;
        root $1;
    }
}
CONF
    nginx -c "$WORK/nginx.conf"
}

# make_certificates DIR: a P-256 CA (DIR/ca.pem) and a server certificate it issued for 127.0.0.1 and localhost
# (DIR/cert.pem, DIR/key.pem), valid for 30 days.
make_certificates() {
    mkdir -p "$1"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 -subj "/CN=Haul bench CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
        -keyout "$1/ca.key" -out "$1/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$1/key.pem" -out "$1/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
        > "$1/server.ext"
    openssl x509 -req -in "$1/server.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial -days 30 \
        -extfile "$1/server.ext" -out "$1/cert.pem" 2>/dev/null
}

stop_nginx() { nginx -c "$WORK/nginx.conf" -s stop 2>/dev/null || true; }

# timed COMMAND...: wall seconds of one run into a clean $WORK/out. A failed run prints "nan" (it never counts
# as a time) and appends its stderr to $FAILURES.
timed() {
    rm -rf "$WORK/out"; mkdir -p "$WORK/out"; sync
    local start end
    start=$(date +%s.%N)
    if ! "$@" >/dev/null 2>"$WORK/stderr"; then
        { echo "== FAILED: $*"; tail -40 "$WORK/stderr"; } >> "$FAILURES"
        echo nan
        return
    fi
    end=$(date +%s.%N)
    python3 -c "print(f'{$end - $start:.4f}')"
}

# median X...: the median of the numbers given, ignoring "nan"; "nan" if none is left.
median() {
    python3 -c "import sys,statistics; v=[float(x) for x in sys.argv[1:] if x!='nan']; print(f'{statistics.median(v):.4f}' if v else 'nan')" "$@"
}

# install_missing CMD[:PACKAGE]...: installs with apt-get the Debian packages of the commands that are missing
# (PACKAGE defaults to CMD, e.g. aria2c:aria2; CMD may be a path, e.g. /usr/bin/time:time).
install_missing() {
    local missing=() spec
    for spec in "$@"; do
        command -v "${spec%%:*}" >/dev/null 2>&1 || missing+=("${spec#*:}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# build_haul: builds the `haul` command as it would be shipped, with the Swift runtime and Foundation linked in
# statically (`--static-swift-stdlib`, the usual way to deploy a Swift executable on Linux), into .build-static;
# sets HAUL to its path. Loading the ~50 shared Swift and ICU libraries of the default build took ~10 ms per start,
# 1-2% of a 10,000-file run. The static Foundation needs libcurl's development files to link.
build_haul() {
    dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq libcurl4-openssl-dev >/dev/null; }
    swift build -c release --product haul --static-swift-stdlib --scratch-path .build-static >/dev/null
    HAUL=$(pwd)/.build-static/release/haul
}
