#!/usr/bin/env bash
# Journal look-ups against the number of records (issue "a million URLs in bounded memory"): fills a journal with
# ROWS completed records, then times opening it, look-ups that hit and miss, and the first run's pattern on an empty
# journal (bench/journal/lookup/Sources/bench-journal-lookup/main.swift says what and the targets).
# Usage: bash bench/journal/lookup.sh [ROWS] [LOOKUPS]   (default 1,000,000 and 200,000)
# HAUL_ROOT=DIR measures another checkout of Haul (an earlier commit, for a before/after pair).
set -euo pipefail
cd "$(dirname "$0")/lookup"
ROOT=${HAUL_ROOT:-$(cd ../../.. && pwd)}
# The versions the root package resolved, so that nothing is fetched again.
[ -f "$ROOT/Package.resolved" ] && cp "$ROOT/Package.resolved" Package.resolved
HAUL_ROOT=$ROOT swift build -c release --scratch-path "${SCRATCH:-$ROOT/.build-bench-journal}" >/dev/null
"${SCRATCH:-$ROOT/.build-bench-journal}/release/bench-journal-lookup" "$@"
