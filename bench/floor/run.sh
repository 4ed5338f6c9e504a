#!/usr/bin/env bash
# bench/floor/run.sh [rounds]: 10,000 x 4 KiB from nginx on loopback into tmpfs, width 8, by `haul get` (with and
# without its journal), by curl and by bench-floor (bench/Sources/bench-floor: the same network and file steps on
# SwiftNIO with nothing else, on 2 event loops and on 1): the floor under `haul get`'s cost per small file, and how
# far above it Haul is.
# The tools alternate, each round starting with the next; medians of ROUNDS rounds (default 7) of wall time and of
# CPU per file (user + system, GNU time). Every run's files are compared with nginx's, byte for byte.
# HAUL=path/to/haul measures that binary instead of building one. Needs root for apt-get (nginx, curl, time).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-7}
files=10000
install_missing nginx curl /usr/bin/time:time
if [[ -z "${HAUL:-}" ]]; then build_haul; fi
WORK=$(mktemp -d /dev/shm/haul-bench-floor.XXXXXX)
chmod 755 "$WORK"
trap 'stop_nginx; rm -rf "$WORK"' EXIT
swift build -c release --product bench-floor >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; exit 1; }
FLOOR=$(pwd)/.build/release/bench-floor
small_files "$WORK/www/small" "$files"
start_nginx "$WORK/www"
ls "$WORK/www/small" | sed "s|^|/small/|" > "$WORK/paths"
sed "s|^|http://127.0.0.1:$NGINX_PORT|" "$WORK/paths" > "$WORK/list"
sed "s|^\(.*\)$|url = \"http://127.0.0.1:$NGINX_PORT\1\"|" "$WORK/paths" > "$WORK/curl.conf"

tools=("bench-floor, 2 loops" "bench-floor, 1 loop" "curl" "haul get" "haul get --no-journal")
# run TOOL: "WALL CPU" seconds of one run into an empty $WORK/out, after checking its files.
run() {
    local out=$WORK/out start end
    rm -rf "$out"; mkdir -p "$out"
    start=$(date +%s%N)
    case "$1" in
        "bench-floor, 2 loops") /usr/bin/time -o "$WORK/usage" -f "%U %S" "$FLOOR" "$NGINX_PORT" "$WORK/paths" "$out" 2 8 ;;
        "bench-floor, 1 loop") /usr/bin/time -o "$WORK/usage" -f "%U %S" "$FLOOR" "$NGINX_PORT" "$WORK/paths" "$out" 1 8 ;;
        "curl") (cd "$out" && /usr/bin/time -o "$WORK/usage" -f "%U %S" curl -s --no-progress-meter --fail --parallel --parallel-max 8 \
            --remote-name-all -K "$WORK/curl.conf") ;;
        "haul get") /usr/bin/time -o "$WORK/usage" -f "%U %S" "$HAUL" get -q -j 8 -d "$out" -i "$WORK/list" ;;
        "haul get --no-journal") /usr/bin/time -o "$WORK/usage" -f "%U %S" "$HAUL" get -q -j 8 --no-journal \
            -d "$out" -i "$WORK/list" ;;
    esac
    end=$(date +%s%N)
    if ! diff -rq -x .haul "$out" "$WORK/www/small" >/dev/null; then
        echo "bench/floor/run.sh: $1 left files that differ from nginx's" >&2
        exit 1
    fi
    echo "$(( (end - start) / 1000 ))e-6 $(awk '{print $1 + $2}' "$WORK/usage")"
}
for tool in "${tools[@]}"; do run "$tool" >/dev/null; done  # warm-up
for index in "${!tools[@]}"; do : > "$WORK/times.$index"; done
for round in $(seq 1 "$rounds"); do
    for offset in "${!tools[@]}"; do
        index=$(( (round + offset) % ${#tools[@]} ))
        run "${tools[$index]}" >> "$WORK/times.$index"
    done
done
echo "## The floor: 10,000 x 4 KiB, width 8, tmpfs, medians of $rounds rounds ($(nproc) cores)"
echo
echo "| tool | wall s | CPU µs per file | speed vs curl |"
echo "|---|---|---|---|"
python3 - "$WORK" "$files" "${tools[@]}" <<'PY'
import statistics, sys
work, files, tools = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = []
for index, tool in enumerate(tools):
    runs = [list(map(float, line.split())) for line in open(f"{work}/times.{index}") if line.strip()]
    rows.append((tool, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)))
curl = next(wall for tool, wall, _ in rows if tool == "curl")
for tool, wall, cpu in rows:
    print(f"| {tool} | {wall:.3f} | {cpu / files * 1e6:.0f} | {curl / wall:.2f}x |")
PY
