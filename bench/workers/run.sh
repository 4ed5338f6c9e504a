#!/usr/bin/env bash
# bench/workers/run.sh [rounds]: many `haul worker` processes on one PostgreSQL queue (issue 31).
#
# 1. Throughput: 10,000 x 64 KiB from `haul serve`, each response throttled to 640 KiB/s (0.1 s per file, so the
#    server's connections are the limit, not the CPU), fetched by 1, 2 and 4 workers of -j 8 each; files/s and the
#    ratio against 1 worker (target: >= 3.2x with 4). The three widths alternate in each round.
# 2. The queue's own cost: 50,000 downloads claimed and completed by 4 workers with --no-op-downloads (each claim
#    succeeds at once, no request): downloads per second (each one claim and one completion; target >= 5,000/s), and
#    database transactions per download (pg_stat_database's xact_commit over the run; every statement Haul sends
#    outside an enqueue is its own transaction; target <= 1).
#
# PostgreSQL 15 (Debian's) in a temporary directory on a free port with its default settings (fsync and synchronous
# commit on), run as the postgres user. Needs root, python3; builds haul like bench/compare (or HAUL=path/to/haul).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-1}
files=${FILES:-10000}
noop_files=${NOOP_FILES:-50000}
if [[ -z "${HAUL:-}" ]]; then build_haul; fi
WORK=$(mktemp -d /var/tmp/haul-workers.XXXXXX)
chown postgres "$WORK"
bin=/usr/lib/postgresql/15/bin
as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)
"${as_postgres[@]}" "$bin/initdb" -D "$WORK/data" -A trust -U haul -E UTF8 --locale=C >/dev/null
pg_port=$(free_port)
# Started as a command, not through a shell function: setpriv execs the server, so $! is the server itself, which
# the EXIT trap stops (a function would run in a subshell, which ignores SIGINT in the background).
"${as_postgres[@]}" "$bin/postgres" -D "$WORK/data" -k "$WORK" -p "$pg_port" -c listen_addresses=127.0.0.1 \
    -c max_connections=200 > "$WORK/postgres.log" 2>&1 &
postgres=$!
start_haul_serve "$WORK/serve.log"
port=$HAUL_SERVE_PORT
trap 'kill $HAUL_SERVE_PID 2>/dev/null || true; kill -INT $postgres 2>/dev/null || true; wait $postgres 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do "$bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break; sleep 0.1; done
export HAUL_DATABASE_URL="postgres://haul@127.0.0.1:$pg_port/postgres?sslmode=disable"
commits() {
    psql -h 127.0.0.1 -p "$pg_port" -U haul -d postgres -At \
        -c "select xact_commit from pg_stat_database where datname = 'postgres'"
}

# run_workers QUEUE COUNT J [worker options...]: COUNT workers on QUEUE until it is empty; prints the wall time.
run_workers() {
    local queue=$1 count=$2 width=$3
    shift 3
    local pids=() start end
    rm -rf "$WORK/out"
    start=$(date +%s.%N)
    for number in $(seq 1 "$count"); do
        "$HAUL" worker --queue "$queue" -d "$WORK/out/w$number" -j "$width" --until-empty -q --no-journal "$@" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    end=$(date +%s.%N)
    python3 -c "print(f'{$end - $start:.3f}')"
}

results="$WORK/results.txt"
for round in $(seq 1 "$rounds"); do
    for workers in 1 2 4; do
        queue="r$round-w$workers"
        python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    f.writelines(f'http://127.0.0.1:{sys.argv[2]}/bytes/f{i:05d}?size=65536&rate=655360\n' for i in range(int(sys.argv[3])))
" "$WORK/list.txt" "$port" "$files"
        "$HAUL" enqueue --queue "$queue" -i "$WORK/list.txt" >/dev/null
        before=$(commits)
        wall=$(run_workers "$queue" "$workers" 8)
        after=$(commits)
        done=$(find "$WORK/out" -type f | wc -l)
        [[ "$done" == "$files" ]] || { echo "round $round, $workers workers: $done of $files files" >&2; exit 1; }
        echo "throughput $workers $wall $((after - before))" >> "$results"
        echo "round $round, $workers worker(s) x -j 8: $wall s, $(python3 -c "print(f'{$files / $wall:.0f}')") files/s," \
            "$((after - before)) transactions"
    done
done

# The queue's own cost.
python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    f.writelines(f'http://127.0.0.1:{sys.argv[2]}/n/f{i:06d}\n' for i in range(int(sys.argv[3])))
" "$WORK/list.txt" "$port" "$noop_files"
"$HAUL" enqueue --queue noop -i "$WORK/list.txt" >/dev/null
before=$(commits)
wall=$(run_workers noop 4 64 --no-op-downloads)
after=$(commits)
echo "noop 4 $wall $((after - before))" >> "$results"

python3 - "$results" "$files" "$noop_files" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
files, noop_files = int(sys.argv[2]), int(sys.argv[3])
rate = {}
for workers in ("1", "2", "4"):
    runs = [r for r in rows if r[0] == "throughput" and r[1] == workers]
    wall = statistics.median(float(r[2]) for r in runs)
    transactions = statistics.median(int(r[3]) for r in runs)
    rate[workers] = files / wall
    print(f"{workers} worker(s) x -j 8: median {wall:.2f} s, {files / wall:.0f} files/s, "
          f"{transactions / files:.3f} transactions per download ({len(runs)} runs)")
ratio = rate["4"] / rate["1"]
print(f"4 workers over 1: {ratio:.2f}x (target >= 3.2x: {'met' if ratio >= 3.2 else 'missed'}); "
      f"2 over 1: {rate['2'] / rate['1']:.2f}x")
noop = [r for r in rows if r[0] == "noop"][0]
per_second = noop_files / float(noop[2])
per_download = int(noop[3]) / noop_files
print(f"queue cost, 4 workers x -j 64, no-op downloads: {noop_files:,} in {float(noop[2]):.2f} s: "
      f"{per_second:,.0f} downloads/s (one claim and one completion each; target >= 5,000: "
      f"{'met' if per_second >= 5000 else 'missed'}), {per_download:.3f} transactions per download "
      f"(target <= 1: {'met' if per_download <= 1 else 'missed'})")
PY
