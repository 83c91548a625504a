#!/usr/bin/env bash
# `make test`: the suite in parallel (docs/design.md, "The test suite in parallel"). It mostly waits (servers,
# runs of a set length, timeouts), so most of it runs on several workers at once; the CPU-bound measurements
# (`heavy`) must each have a core, so they run two at a time at normal priority while everything else runs
# beside them at the idle priority (SCHED_IDLE, or nice 19 where chrt is missing: it gets what they leave). A test that fails beside others is run again,
# alone: wall-clock checks (a loop block, a schedule lag, a latency) cannot tell the code's delay from a busy
# machine's, so only a failure alone fails the suite, and this log names every test that needed it. Last, the
# `alone` measurement, with nothing beside it. TEST_WORKERS=1: everything in one process, in one phase.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
WORKERS=${TEST_WORKERS:-4}
if [ "$WORKERS" = 1 ]; then
    exec "$PYTHON" -m pytest "$@"
fi
# The modules holding heavy or alone tests: their phases collect only these (a whole collection takes 10 s).
mapfile -t HEAVY < <(grep -rlE "mark\.heavy" tests --include='test_*.py' | sort)
mapfile -t ALONE < <(grep -rlE "mark\.alone" tests --include='test_*.py' | sort)
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

# Each phase keeps its own cache, so each one's --last-failed is its own.
LOWEST=(nice -n 19)
if command -v chrt > /dev/null && chrt -i 0 true 2> /dev/null; then LOWEST=(chrt -i 0); fi
"${LOWEST[@]}" "$PYTHON" -m pytest -n "$WORKERS" --dist loadscope -m "not heavy and not alone" \
    -o cache_dir=.pytest_cache/rest "$@" > "$LOGS/rest.log" 2>&1 &
REST=$!
"$PYTHON" -m pytest -n 2 --dist loadscope -m "heavy and not alone" -o cache_dir=.pytest_cache/heavy "$@" "${HEAVY[@]}"
HEAVY_STATUS=$?
wait "$REST"
REST_STATUS=$?
echo "== the rest of the suite, beside the heavy tests (${LOWEST[*]}), on $WORKERS workers =="
cat "$LOGS/rest.log"

again() {  # what failed in phase $1 (tests marked $2, in the modules after), run again alone
    local phase=$1 marks=$2
    shift 2
    echo "== failed beside other tests ($phase): run again, alone =="
    "$PYTHON" -m pytest --last-failed --last-failed-no-failures none -m "$marks" -o cache_dir=".pytest_cache/$phase" "$@"
}
STATUS=0
if [ "$REST_STATUS" -ne 0 ]; then again rest "not heavy and not alone" || STATUS=1; fi
if [ "$HEAVY_STATUS" -ne 0 ]; then again heavy "heavy and not alone" "${HEAVY[@]}" || STATUS=1; fi
# The alone measurements run with nothing beside them already; one that fails is given one more try, alone
# (a burst's p99 schedule lag over 126 requests is its second-largest: one scheduler hiccup on a VM moves it).
"$PYTHON" -m pytest -m alone -o cache_dir=.pytest_cache/alone "$@" "${ALONE[@]}" \
    || again alone alone "${ALONE[@]}" || STATUS=1
exit "$STATUS"
