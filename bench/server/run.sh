#!/usr/bin/env bash
# HaulTestServer benchmark (issue "HaulTestServer"): `haul serve` against nginx serving the same bytes on
# the same machine in the same run, so the test server is never the bottleneck of our other benchmarks.
#   1. one 1 GiB body fetched with curl (from a file, and generated)   target: >= 0.8x nginx's throughput
#   2. 16 KiB responses per second with keep-alive (wrk)                 target: >= 0.5x nginx's rate
# Usage: bash bench/server/run.sh [RUNS]   (default 5). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
RUNS=${1:-5}
WRK_SECONDS=${WRK_SECONDS:-8}

install_missing nginx curl wrk
build_haul

WORK=$(mktemp -d /var/tmp/haul-bench-server.XXXXXX)
chmod 755 "$WORK"   # nginx workers run as www-data
HAUL_PID=""
cleanup() {
    stop_nginx
    if [ -n "$HAUL_PID" ]; then kill "$HAUL_PID" 2>/dev/null || true; wait "$HAUL_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/www"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$WORK/www/big.bin"
head -c 16384 /dev/urandom > "$WORK/www/small.bin"

start_nginx "$WORK/www"

HAUL_PORT=$(free_port)
"$HAUL" serve "$WORK/www" --port "$HAUL_PORT" > "$WORK/haul.out" 2>&1 &
HAUL_PID=$!
for _ in $(seq 1 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$HAUL_PORT/small.bin" && break
    sleep 0.1
done

NGINX="http://127.0.0.1:$NGINX_PORT"
SERVE="http://127.0.0.1:$HAUL_PORT"
GENERATED="$SERVE/bytes/big?size=$((1024 * 1024 * 1024))"

# Bytes per second of one curl download to /dev/null; the body size is checked so a short body never counts.
large() {
    curl -s -o /dev/null -w '%{speed_download} %{size_download}\n' "$1" |
        awk '$2 == 1073741824 { print $1; next } { print "nan" }'
}
# Requests per second over keep-alive connections (2 threads, 16 connections).
small() {
    wrk -t2 -c16 -d"${WRK_SECONDS}s" "$1" | awk '/Requests\/sec/ { print $2 }'
}
echo "warm-up..."
large "$NGINX/big.bin" >/dev/null; large "$SERVE/big.bin" >/dev/null; large "$GENERATED" >/dev/null
WRK_SECONDS=2 small "$NGINX/small.bin" >/dev/null; WRK_SECONDS=2 small "$SERVE/small.bin" >/dev/null

L_NGINX=""; L_FILE=""; L_GEN=""; S_NGINX=""; S_SERVE=""
for _ in $(seq 1 "$RUNS"); do   # alternating servers within each run
    L_NGINX="$L_NGINX $(large "$NGINX/big.bin")"
    L_FILE="$L_FILE $(large "$SERVE/big.bin")"
    L_GEN="$L_GEN $(large "$GENERATED")"
    S_NGINX="$S_NGINX $(small "$NGINX/small.bin")"
    S_SERVE="$S_SERVE $(small "$SERVE/small.bin")"
done

echo
echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr). Medians of $RUNS runs."
python3 - "$(median $L_NGINX)" "$(median $L_FILE)" "$(median $L_GEN)" "$(median $S_NGINX)" "$(median $S_SERVE)" <<'PY'
import sys
nginx_l, file_l, gen_l, nginx_s, serve_s = map(float, sys.argv[1:])
mb = 1e6
print()
print("| what | nginx | haul serve | ratio | target |")
print("|---|---|---|---|---|")
print(f"| 1 GiB from a file, MB/s | {nginx_l/mb:.0f} | {file_l/mb:.0f} | {file_l/nginx_l:.2f}x | >= 0.8x |")
print(f"| 1 GiB generated (/bytes), MB/s | {nginx_l/mb:.0f} | {gen_l/mb:.0f} | {gen_l/nginx_l:.2f}x | >= 0.8x |")
print(f"| 16 KiB responses/s, keep-alive | {nginx_s:.0f} | {serve_s:.0f} | {serve_s/nginx_s:.2f}x | >= 0.5x |")
print()
checks = [("1 GiB from a file >= 0.8x nginx", file_l / nginx_l >= 0.8),
          ("1 GiB generated >= 0.8x nginx", gen_l / nginx_l >= 0.8),
          ("16 KiB responses/s >= 0.5x nginx", serve_s / nginx_s >= 0.5)]
missed = [name for name, ok in checks if not ok]
for name, ok in checks:
    print(f"target {name}: {'met' if ok else 'MISSED'}")
sys.exit(1 if missed else 0)
PY
