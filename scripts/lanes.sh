# shellcheck shell=bash
# Runs the built test targets in concurrent lanes, for scripts/test. Source it after lib.sh.
#
# Why lanes: nearly every integration test waits on Docker, a registry or Postgres, so one
# test binary at a time leaves the two cores idle for most of the suite. The binaries do not
# share state (each test makes its own database, app names, registries and network
# namespaces), except those in PIER_TEST_EXCLUSIVE, which run alone after the others: the
# database outage test stops the shared Postgres, which no other test may see, and web's
# browser test drives Chromium, which aborts a page load (ERR_NETWORK_CHANGED) whenever
# the host's interfaces change, as they do all the time while other binaries' tests add
# and remove container networks and network namespaces.
#
# Each target's output goes to target/test-logs/NAME.log and is printed whole when the
# target ends, so a CI log reads one binary at a time. A target that outlives its budget
# has its whole process group stopped (cargo and the test binary it runs), so a hung test
# costs minutes, not CI's whole allowance.

# Longest first, from runs on two cores (seconds, one binary at a time on a quiet machine:
# targets 536, deploy 482, queue 150, contained 141, intake 91, proxy 48, docs 26; the
# benches' single rounds with the unit tests about 175, but 542 beside the others on a
# loaded one): a long target started last would end the suite alone. @units stands for
# the library's and binary's unit tests with the benches. Targets not named here run after
# these, in cargo's order.
PIER_TEST_LONG_FIRST=(targets deploy @units queue contained intake proxy docs database_failover)
PIER_TEST_EXCLUSIVE=(web database_outage)

# lane_targets: prints one cargo target selection per line ("--test deploy", "--lib"...),
# longest first; the exclusive ones are left out (see exclusive_targets).
lane_targets() {
    local all name
    all="$(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
meta = json.load(sys.stdin)
for pkg in meta["packages"]:
    for t in pkg["targets"]:
        if "test" in t["kind"]:
            print(t["name"])
')" || die "cargo metadata failed"
    for name in "${PIER_TEST_LONG_FIRST[@]}"; do
        if [[ "$name" == @units ]]; then
            # A bench's main runs one short round without --bench: a smoke test that it
            # still works, not a measurement.
            printf -- '--lib --bins --benches\n'
        elif grep -qx -- "$name" <<<"$all"; then
            printf -- '--test %s\n' "$name"
        fi
    done
    while IFS= read -r name; do
        [[ -z "$name" ]] && continue
        _pier_in_list "$name" "${PIER_TEST_LONG_FIRST[@]}" "${PIER_TEST_EXCLUSIVE[@]}" && continue
        printf -- '--test %s\n' "$name"
    done <<<"$all"
}

exclusive_targets() {
    local name
    for name in "${PIER_TEST_EXCLUSIVE[@]}"; do
        printf -- '--test %s\n' "$name"
    done
}

_pier_in_list() {
    local needle="$1" x
    shift
    for x in "$@"; do
        [[ "$x" == "$needle" ]] && return 0
    done
    return 1
}

# run_in_lanes LANES BUDGET_SECS SELECTION...: runs `cargo test --locked SELECTION` for each
# selection, at most LANES at once; returns non-zero if any failed or ran out of time, after
# all have ended. Sets LANES_FAILED to the selections that failed.
run_in_lanes() {
    local lanes="$1" budget="$2"
    shift 2
    local logs="$PIER_ROOT/target/test-logs"
    mkdir -p "$logs"
    LANES_FAILED=()
    local -A job_sel=() job_log=() job_start=()
    local pending=("$@") running=0 pid sel log status verdict
    while ((${#pending[@]} > 0 || running > 0)); do
        while ((${#pending[@]} > 0 && running < lanes)); do
            sel="${pending[0]}"
            pending=("${pending[@]:1}")
            log="$logs/$(tr -c 'a-zA-Z0-9_\n' '_' <<<"$sel" | sed 's/^_*//').log"
            info "start: cargo test ${sel}"
            # timeout puts cargo in a process group of its own and, at the deadline, signals
            # the whole group: the test binary cargo runs stops with it.
            # shellcheck disable=SC2086  # a selection is several words on purpose
            timeout --kill-after=30 "$budget" cargo test --locked $sel >"$log" 2>&1 &
            pid=$!
            job_sel[$pid]="$sel" job_log[$pid]="$log" job_start[$pid]=$SECONDS
            running=$((running + 1))
        done
        status=0
        wait -n -p pid "${!job_sel[@]}" || status=$?
        [[ -n "${pid:-}" && -n "${job_sel[$pid]:-}" ]] || continue
        sel="${job_sel[$pid]}"
        case "$status" in
        0) verdict=ok ;;
        124 | 137) verdict="STOPPED at its ${budget}s budget" ;;
        *) verdict="FAILED (exit $status)" ;;
        esac
        section "cargo test ${sel}: ${verdict} in $((SECONDS - job_start[$pid]))s"
        cat "${job_log[$pid]}"
        ((status == 0)) || LANES_FAILED+=("$sel")
        unset "job_sel[$pid]" "job_log[$pid]" "job_start[$pid]"
        running=$((running - 1))
    done
    ((${#LANES_FAILED[@]} == 0))
}
