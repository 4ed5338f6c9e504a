#!/usr/bin/env bash
# bench/lists/check.sh [runs]: the time `haul get -i LIST` spends reading and checking its list before the first
# request, for lists of 10,000 and 100,000 URLs (tmpfs). `haul get` plans every entry of a list before it downloads
# anything (a bad list downloads nothing), so this is time to the first byte for every list, and, planned a second
# time as the downloads run, part of the CPU each small file costs (bench/compare, s3).
#
# Each list ends with a line that does not plan (an ftp:// URL): the command checks every entry, reports that line
# and exits with status 2, and nothing is fetched. hyperfine runs the command (warm-up 5, then RUNS runs, default 30).
# BASELINE=path/to/other/haul runs both and prints their ratio, twice, the second time in the other order (hyperfine
# runs one command's runs, then the other's). HAUL=path/to/haul measures that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
runs=${1:-30}
install_missing hyperfine
if [[ -z "${HAUL:-}" ]]; then build_haul; fi
work=$(mktemp -d /dev/shm/haul-bench-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
for count in 10000 100000; do
    python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    f.writelines(f'http://127.0.0.1:9/files/f{i:07d}.bin\n' for i in range(int(sys.argv[2])))
    f.write('ftp://127.0.0.1/not-planned\n')
" "$work/list-$count.txt" "$count"
    # The command must have checked the whole list and refused only its last line.
    status=0
    "$HAUL" get -q -d "$work/out" -i "$work/list-$count.txt" 2> "$work/err" || status=$?
    if [[ $status != 2 ]] || ! grep -q "list-$count.txt:$((count + 1))" "$work/err"; then
        echo "bench/lists/check.sh: expected exit status 2 naming line $((count + 1)); got $status:" >&2
        cat "$work/err" >&2
        exit 1
    fi
    haul="$HAUL get -q -d $work/out -i $work/list-$count.txt"
    echo "## $count entries"
    if [[ -z "${BASELINE:-}" ]]; then
        hyperfine -N -i -w 5 -r "$runs" "$haul" 2>&1 | grep -E "Benchmark|Time"
    else
        baseline="$BASELINE get -q -d $work/out -i $work/list-$count.txt"
        hyperfine -N -i -w 5 -r "$runs" "$haul" "$baseline" 2>&1 | grep -E "Benchmark|Time|faster|±"
        hyperfine -N -i -w 5 -r "$runs" "$baseline" "$haul" 2>&1 | grep -E "Benchmark|Time|faster|±"
    fi
done
