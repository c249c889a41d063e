# Sourced by the tests/cli, tests/install and tests/provider scripts: one line per check on stdout ("ok: ..." or
# "FAIL: ..."); any failure sets fail=1, which the script exits with.
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
check() {  # check DESCRIPTION PATTERN TEXT
  if printf '%s\n' "$3" | grep -qE -- "$2"; then ok "$1"; else bad "$1 (no /$2/ in:)"; printf '%s\n' "$3" | sed 's/^/    /'; fi
}
check_not() {  # check_not DESCRIPTION PATTERN TEXT
  if printf '%s\n' "$3" | grep -qE -- "$2"; then bad "$1 (/$2/ in:)"; printf '%s\n' "$3" | sed 's/^/    /'; else ok "$1"; fi
}
expect_rc() {  # expect_rc DESCRIPTION WANT GOT
  if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else bad "$1: exit $3, want $2"; fi
}
# perftest_clock_refused FILE...: a perftest side exited without its report because perftest's own
# calibration of the TSC against gettimeofday failed (its r^2 < 0.9: the process lost its CPU while it timed
# the clock, as when two tests share the two CPUs). Not the transport's failure: the caller runs the pair
# once more.
perftest_clock_refused() { grep -qs "Correlation coefficient r^2" "$@"; }
check_captures() {  # check_captures URXE DIR MIN: at least MIN pcapng files in DIR, each passing decode --strict
  _cc_n=0
  for _cc_f in "$2"/*.pcapng; do
    [ -e "$_cc_f" ] || continue
    _cc_n=$((_cc_n + 1))
    if ! _cc_out=$("$1" pcap decode --strict "$_cc_f" 2>&1); then
      bad "urxe pcap decode --strict $(basename "$_cc_f")"
      printf '%s\n' "$_cc_out" | tail -3 | sed 's/^/    /'
    fi
  done
  if [ $_cc_n -ge "$3" ]; then ok "$_cc_n captures (a context each), every frame well-formed with a good ICRC"
  else bad "$_cc_n captures, want $3 at least"; fi
}
