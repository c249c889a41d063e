# Sourced by the tests/cli and tests/install scripts: one line per check on stdout ("ok: ..." or
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
