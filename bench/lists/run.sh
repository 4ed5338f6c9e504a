#!/usr/bin/env bash
# bench/lists/run.sh [rounds]: `haul get` alone on 100,000 and 1,000,000 tiny files, the two alternating, on tmpfs,
# each run against a fresh `haul serve` (issue 30: a list's cost per URL must not grow with its length).
#
# bench/compare's list rows run each tool once per list, so one row's files/s carries that run's luck (±5-10% here
# between runs of the same binary). This runs the two lists alternately for several rounds and prints, per run, the
# wall time and haul's user and system CPU per file, then the medians and the files/s ratio (1M over 100k). tmpfs:
# on ext4 the file system's cost per file grows with a directory of a million entries (see bench/README.md).
# Needs root (a tmpfs mount), python3; builds haul like bench/compare (or HAUL=path/to/haul).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
rounds=${1:-3}
# SMALL and LARGE (default 100000 and 1000000) change the two lengths, e.g. for a quick check of the script.
small=${SMALL:-100000}
large=${LARGE:-1000000}
if [[ -z "${HAUL:-}" ]]; then build_haul; fi
work=$(mktemp -d /var/tmp/haul-lists.XXXXXX)
mount -t tmpfs -o size=12g tmpfs "$work"
trap 'umount "$work" 2>/dev/null; rmdir "$work"' EXIT
results="$work/results.txt"
for round in $(seq 1 "$rounds"); do
    for count in "$small" "$large"; do
        start_haul_serve "$work/serve.log"
        python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    f.writelines(f'http://127.0.0.1:{sys.argv[2]}/bytes/f{i:07d}?size=64\n' for i in range(int(sys.argv[3])))
" "$work/list.txt" "$HAUL_SERVE_PORT" "$count"
        rm -rf "$work/out"
        sync
        /usr/bin/time -o "$work/time.txt" -f "%e %U %S %M" "$HAUL" get -q -j 8 -d "$work/out" -i "$work/list.txt"
        kill "$HAUL_SERVE_PID"
        wait "$HAUL_SERVE_PID" 2>/dev/null || true
        files=$(find "$work/out" -maxdepth 1 -type f | wc -l)
        [[ "$files" == "$count" ]] || { echo "round $round: $files of $count files" >&2; exit 1; }
        read -r wall user system rss < "$work/time.txt"
        echo "$count $wall $user $system $rss" >> "$results"
        echo "round $round, $count files: $wall s, $user s user, $system s system, peak RSS $((rss / 1024)) MiB"
    done
done
python3 - "$results" "$small" "$large" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
summary = {}
for count in sys.argv[2:4]:
    runs = [r for r in rows if r[0] == count]
    n = int(count)
    wall = statistics.median(float(r[1]) for r in runs)
    user = statistics.median(float(r[2]) for r in runs) / n * 1e6
    system = statistics.median(float(r[3]) for r in runs) / n * 1e6
    rss = max(int(r[4]) for r in runs) / 1024
    summary[count] = n / wall
    print(f"{n:>9,} files: median {wall:.2f} s, {n / wall:,.0f} files/s, user {user:.1f} us and system "
          f"{system:.1f} us per file, peak RSS {rss:.0f} MiB ({len(runs)} runs)")
ratio = summary[sys.argv[3]] / summary[sys.argv[2]]
print(f"files/s, {int(sys.argv[3]):,} over {int(sys.argv[2]):,}: {ratio:.3f}x (target >= 1.0x: {'met' if ratio >= 1.0 else 'missed'})")
sys.exit(0 if ratio >= 1.0 else 1)
PY
