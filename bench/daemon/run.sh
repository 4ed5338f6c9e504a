#!/usr/bin/env bash
# bench/daemon/run.sh: haul daemon under aria2 clients' load (issue 49's targets), measured by bench/daemon/rpc.py.
#
# 1. Lists: 10,000 addUri in one system.multicall (target < 2 s); with 9,000 waiting and 1,000 stopped,
#    tellWaiting(0,1000) and tellStopped(-1,1000) (target < 20 ms each); four clients polling once a second as
#    AriaNg does (target < 5% of a core).
# 2. History: 100,000 downloads of a 4-byte file from nginx, 1,000 per multicall, each thousand run to the end before
#    the next: peak RSS with 100,000 finished downloads in the history (target < 64 MiB).
#
# 3. Throughput: bench/compare's s2w8 (200 x 1 MiB) and s3 (10,000 x 4 KiB) at width 8 through the daemon (every
#    URL in one multicall, timed until the last one completed) against `haul get -j 8 -i LIST` (its whole run), the
#    two alternating, each run into a new directory (target: the daemon within 5% of haul get). ROUNDS (default 9).
#
# Each part on a fresh daemon in a fresh directory on the real disk. Builds haul like bench/compare (or
# HAUL=path/to/haul). MODES picks parts (default "lists history throughput").
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
if [[ -z "${HAUL:-}" ]]; then build_haul; fi
WORK=$(mktemp -d ${BENCH_DIR:-/var/tmp}/haul-daemon.XXXXXX)
chmod 755 "$WORK"   # nginx workers run as www-data
mkdir -p "$WORK/www/m"
printf 'haul' > "$WORK/www/small"
for i in $(seq -f %03g 0 199); do head -c $((1 << 20)) /dev/urandom > "$WORK/www/m/f$i"; done
small_files "$WORK/www/k" 10000
start_nginx "$WORK/www"
daemon_pid=
# Each step may fail (the daemon is usually gone already): under set -e a failing one would end the trap there,
# leaving nginx running and the files behind.
trap 'kill $daemon_pid 2>/dev/null || true; stop_nginx || true; rm -rf "$WORK"' EXIT

# run MODE: a fresh daemon in $WORK/MODE, the measures of rpc.py MODE.
run() {
    local dir=$WORK/$1 port
    rm -rf "$dir"
    mkdir -p "$dir"
    port=$(free_port)
    "$HAUL" daemon -d "$dir" --rpc-listen "127.0.0.1:$port" -j 8 --retries 0 2> "$WORK/$1.log" &
    daemon_pid=$!
    for _ in $(seq 1 100); do grep -q 'serving aria2' "$WORK/$1.log" && break; sleep 0.1; done
    HAUL="$HAUL" python3 bench/daemon/rpc.py "$port" "$(cat "$dir/.haul/rpc-secret")" "$daemon_pid" \
        "http://127.0.0.1:$NGINX_PORT" "$1" "$dir"
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
}

for mode in ${MODES:-lists history throughput}; do run "$mode"; done
