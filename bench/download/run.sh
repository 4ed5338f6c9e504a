#!/usr/bin/env bash
# Download engine benchmark: Haul's engine (`Downloader`, `DownloadQueue`) on each transport against curl and
# wget2, same nginx on loopback, destination on the real disk, warm-up then medians of RUNS runs. The targets are
# judged on NIOTransport, the transport Haul defaults to.
#   1. one 1 GiB file                       target: >= 1.0x curl's throughput
#   2. 2,000 x 16 KiB files at width 8      target: >= 1.2x curl --parallel --parallel-max 8
#   3. peak RSS downloading a 2 GiB file    target: < 64 MiB
# Usage: bash bench/download/run.sh [RUNS]   (default 5). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
RUNS=${1:-5}

install_missing nginx curl wget2 /usr/bin/time:time
swift build -c release --product bench-download >/dev/null
BIN=.build/release/bench-download

WORK=$(mktemp -d /var/tmp/haul-bench.XXXXXX)   # /var/tmp: the real disk, not tmpfs
chmod 755 "$WORK"                               # nginx workers run as www-data
trap 'stop_nginx; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www/small" "$WORK/out"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$WORK/www/big.bin"
head -c $((2 * 1024 * 1024 * 1024)) /dev/zero > "$WORK/www/huge.bin"
for i in $(seq 1 2000); do head -c 16384 /dev/urandom > "$WORK/www/small/f$i.bin"; done

start_nginx "$WORK/www"
PORT=$NGINX_PORT
BASE="http://127.0.0.1:$PORT"
for i in $(seq 1 2000); do echo "$BASE/small/f$i.bin"; done > "$WORK/small.txt"
{ for i in $(seq 1 2000); do echo "url = \"$BASE/small/f$i.bin\""; echo "output = \"$WORK/out/f$i.bin\""; done; } > "$WORK/small.curl"

FAILURES=/tmp/haul-bench-failures.log
: > "$FAILURES"
declare -A LARGE SMALL
TOOLS_LARGE=(curl wget2 haul-nio haul-ahc haul-urlsession)
run_large() {
    case $1 in
        curl) timed curl -s -o "$WORK/out/big.bin" "$BASE/big.bin" ;;
        wget2) timed wget2 -q --no-robots -O "$WORK/out/big.bin" "$BASE/big.bin" ;;
        haul-nio) timed "$BIN" --transport nio --out "$WORK/out/big.bin" "$BASE/big.bin" ;;
        haul-ahc) timed "$BIN" --transport async-http-client --out "$WORK/out/big.bin" "$BASE/big.bin" ;;
        haul-urlsession) timed "$BIN" --transport urlsession --out "$WORK/out/big.bin" "$BASE/big.bin" ;;
    esac
}
run_small() {
    case $1 in
        curl) timed curl -s --parallel --parallel-max 8 -K "$WORK/small.curl" ;;
        wget2) timed wget2 -q --no-robots --max-threads 8 -P "$WORK/out" -nd -i "$WORK/small.txt" ;;
        haul-nio) timed "$BIN" --transport nio --width 8 --dir "$WORK/out" --list "$WORK/small.txt" ;;
        haul-ahc) timed "$BIN" --transport async-http-client --width 8 --dir "$WORK/out" --list "$WORK/small.txt" ;;
        haul-urlsession) timed "$BIN" --transport urlsession --width 8 --dir "$WORK/out" --list "$WORK/small.txt" ;;
    esac
}

echo "warm-up..."
for tool in "${TOOLS_LARGE[@]}"; do run_large "$tool" >/dev/null; run_small "$tool" >/dev/null; done
for run in $(seq 1 "$RUNS"); do
    for tool in "${TOOLS_LARGE[@]}"; do   # alternating tools within each run
        LARGE[$tool]="${LARGE[$tool]:-} $(run_large "$tool")"
        SMALL[$tool]="${SMALL[$tool]:-} $(run_small "$tool")"
    done
done

rm -rf "$WORK/out"; mkdir -p "$WORK/out"
RSS=$("$BIN" --transport nio --out "$WORK/out/huge.bin" "$BASE/huge.bin" | sed -E 's/.*maxrss_kib=([0-9]+).*/\1/')
RSS_AHC=$("$BIN" --transport async-http-client --out "$WORK/out/huge.bin" "$BASE/huge.bin" | sed -E 's/.*maxrss_kib=([0-9]+).*/\1/')
RSS_URLSESSION=$("$BIN" --transport urlsession --out "$WORK/out/huge.bin" "$BASE/huge.bin" | sed -E 's/.*maxrss_kib=([0-9]+).*/\1/')

echo
echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr), destination $(df -T /var/tmp | awk 'NR==2{print $2}')"
echo "Medians of $RUNS runs."
echo
CURL_L=$(median ${LARGE[curl]}); CURL_S=$(median ${SMALL[curl]})
printf '| tool | 1 GiB: s | MB/s | vs curl | 2,000 x 16 KiB @8: s | files/s | vs curl |\n|---|---|---|---|---|---|---|\n'
for tool in "${TOOLS_LARGE[@]}"; do
    L=$(median ${LARGE[$tool]}); S=$(median ${SMALL[$tool]})
    python3 -c "
nan=float('nan')
L,S,CL,CS=$L,$S,$CURL_L,$CURL_S
print(f'| $tool | {L:.2f} | {1073.741824/L:.0f} | {CL/L:.2f}x | {S:.2f} | {2000/S:.0f} | {CS/S:.2f}x |')"
done
echo
echo "Peak RSS downloading 2 GiB: nio $((RSS / 1024)) MiB, async-http-client $((RSS_AHC / 1024)) MiB, urlsession $((RSS_URLSESSION / 1024)) MiB (target < 64 MiB on nio)"
python3 - "$(median ${LARGE[haul-nio]})" "$CURL_L" "$(median ${SMALL[haul-nio]})" "$CURL_S" "$RSS" <<'PY'
import sys
large, curl_large, small, curl_small, rss = map(float, sys.argv[1:])
checks = [("1 GiB >= 1.0x curl", curl_large / large >= 1.0),
          ("2,000 x 16 KiB >= 1.2x curl --parallel", curl_small / small >= 1.2),
          ("peak RSS < 64 MiB", rss / 1024 < 64)]
for name, ok in checks:
    print(f"target {name}: {'met' if ok else 'MISSED'}")
PY
if [ -s "$FAILURES" ]; then echo "Some runs FAILED (not counted); see $FAILURES"; fi
