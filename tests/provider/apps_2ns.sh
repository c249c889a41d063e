#!/bin/sh
# Unmodified verbs applications between two network namespaces joined by a veth pair, urxe0 on each side
# (each side with its own mount namespace: its own /dev/infiniband and run directory), over the port
# `urxe link add` picks by default. Server in ns A, client in ns B; both must exit 0 and print their result.
#   usage: apps_2ns.sh DEVCTL PROVIDER_SO "APP ARGS" ["APP ARGS" ...]
#   (the client gets the server's address appended; the veth MTU is $URXE_TEST_MTU, default 1500)
# URXE_TEST_FLAP=SECS: 1.5 s into each client run, the client's interface goes down for SECS (its carrier
# and the server's); the flap must fall inside the run. URXE_TEST_CLIENT_FAILS=REGEX: the client must fail
# instead, printing REGEX (e.g. a completion error), and the server may fail too.
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
devctl=$1; so=$2; shift 2
mkdir -p /dev/infiniband
a=urxeA$$; b=urxeB$$
netns_tmpdir tmp urxe-apps || exit 1
netns_pair $a $b va vb 10.88.0.1/24 10.88.0.2/24 || exit 1

side() {  # side NS IFACE OUTFILE CMD...
  _sd_ns=$1 _sd_if=$2 _sd_out=$3
  shift 3
  netns_urxe_side "$_sd_ns" "$_sd_if" "$_sd_out" "$devctl" "$so" "" "$@"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

fail=0
t_all=$(now)
for app in "$@"; do
  t0=$(now)
  # shellcheck disable=SC2086
  side $a va "$tmp/server" $app &
  srv=$!
  netns_wait_listen $srv $a  # the server listens on TCP 18515 (ibverbs-utils, perftest)
  side $b vb "$tmp/client" $app 10.88.0.1 &
  cli=$!
  flap_missed=0
  if [ -n "${URXE_TEST_FLAP:-}" ]; then
    sleep 1.5
    kill -0 $cli 2>/dev/null || flap_missed=1
    ip -n $b link set vb down
    sleep "$URXE_TEST_FLAP"
    ip -n $b link set vb up
    [ -n "${URXE_TEST_CLIENT_FAILS:-}" ] || kill -0 $cli 2>/dev/null || flap_missed=1
  fi
  wait $cli
  crc=$?
  wait $srv
  src=$?
  if [ -n "${URXE_TEST_CLIENT_FAILS:-}" ]; then
    if [ $crc -ne 0 ] && [ $crc -ne 124 ] && grep -qE "$URXE_TEST_CLIENT_FAILS" "$tmp/client" &&
       [ $flap_missed = 0 ]; then
      echo "ok: $app failed as expected (client rc $crc, server rc $src; $(elapsed "$t0"))"
      grep -E "$URXE_TEST_CLIENT_FAILS" "$tmp/client" | head -3 | sed 's/^/  /'
    else
      echo "FAIL: $app should fail with /$URXE_TEST_CLIENT_FAILS/ (client rc $crc, server rc $src)"
      sed 's/^/  client: /' "$tmp/client"
      fail=1
    fi
    continue
  fi
  if [ $flap_missed = 1 ]; then
    echo "FAIL: $app ended before the link came back up: the flap was not inside the run"
    fail=1
  elif [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    echo "FAIL: $app (server rc $src, client rc $crc)"
    sed 's/^/  server: /' "$tmp/server"
    sed 's/^/  client: /' "$tmp/client"
    fail=1
  else
    echo "ok: $app ($(elapsed "$t0"))"
    grep -E "iters in|^ *[0-9]+ +[0-9]+ +[0-9.]+" "$tmp/client" | sed 's/^/  /'
  fi
done
echo "$# apps in $(elapsed "$t_all")"
exit $fail
