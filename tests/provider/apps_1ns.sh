#!/bin/sh
# Both processes of each unmodified app in one network namespace on one urxe device (the first thing
# users try): server and client share urxe0 on va; the client connects to va's own address.
#   usage: apps_1ns.sh DEVCTL PROVIDER_SO "APP ARGS" ["APP ARGS" ...]   (veth MTU: $URXE_TEST_MTU, default 1500)
# The two processes exchange their frames through the same-host path (shared memory, on by default): each
# app must leave va's transmit counter (nearly) unchanged while the device's counters show the traffic.
# URXE_TEST_LOCAL_PATH=0: the device made with --no-local-path instead, and va must carry every frame (the
# fall-back to the port); URXE_TEST_LOCAL_PATH=qdisc: the same because va has a tc ingress qdisc (clsact),
# whose filters the frames must keep crossing. URXE_TEST_PCAP=1: also both processes' captures, every frame passing
# `urxe pcap decode --strict`. URXE_TEST_PCAP=server: only the server captures, so the client (which then
# leaves the ICRC to the path and batches a message's middle packets) sends batch frames that the server's
# capture must record as the packets they stand for; the client's log must show batches sent.
set -u
. "$(dirname "$0")/../lib/netns.sh"
. "$(dirname "$0")/../lib/check.sh"
netns_require_root
netns_private "$0" "$@"
devctl=$1; so=$2; shift 2
netns_devfs || exit 1
netns_veth va vb 10.89.0.1/24 || exit 1
netns_wait_up va
netns_tmpdir tmp urxe-apps1 || exit 1
export URXE_RUN_DIR="$tmp/run" URXE_PROVIDER="$so"
local_path=${URXE_TEST_LOCAL_PATH:-1}
unset URXE_LOCAL_PATH
opts=""
[ "$local_path" = 0 ] && opts=--no-local-path
if [ "$local_path" = qdisc ]; then
  tc qdisc add dev va clsact || exit 1
fi
# shellcheck disable=SC2086
"$devctl" link add urxe0 netdev va $opts >/dev/null || exit 1
eval "$("$devctl" env)"
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

tx_packets() { awk -F'[: ]+' '$2 == "va" { print $12 }' /proc/net/dev; }  # this namespace's va
sent_pkts() { "$devctl" stats urxe0 --json | sed -n 's/.*"sent_pkts":\([0-9]*\).*/\1/p' | head -1; }

fail=0 batches=0
t_all=$(now)
for app in "$@"; do
  t0=$(now)
  tx0=$(tx_packets) sent0=$(sent_pkts)
  srv_env="" cli_env=""
  if [ "${URXE_TEST_PCAP:-0}" != 0 ]; then
    rm -rf "$tmp/pcap"
    mkdir -p "$tmp/pcap"
    if [ "$URXE_TEST_PCAP" = 1 ]; then
      export URXE_PCAP="$tmp/pcap"
    else
      srv_env="URXE_PCAP=$tmp/pcap" cli_env="URXE_DEBUG=1"
    fi
  fi
  try=1
  while :; do
    # shellcheck disable=SC2086
    timeout 60 env $srv_env $app >"$tmp/server" 2>&1 &
    srv=$!
    netns_wait_listen $srv  # the server listens on TCP 18515 (ibverbs-utils, perftest)
    # shellcheck disable=SC2086
    timeout 60 env $cli_env $app 10.89.0.1 >"$tmp/client" 2>&1
    crc=$?
    wait $srv
    src=$?
    why=$(known_app_race "$tmp/server" "$tmp/client")
    if [ $try = 1 ] && [ $((crc + src)) -ne 0 ] && [ -n "$why" ]; then
      echo "RETRY: $app: $why"
      try=2
      continue
    fi
    break
  done
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    echo "FAIL: $app (server rc $src, client rc $crc)"
    sed 's/^/  server: /' "$tmp/server"
    sed 's/^/  client: /' "$tmp/client"
    fail=1
  else
    echo "ok: $app ($(elapsed "$t0"))"
    grep -E "iters in|^ *[0-9]+ +[0-9]+ +[0-9.]+" "$tmp/client" | sed 's/^/  /'
  fi
  dtx=$(($(tx_packets) - tx0)) dsent=$(($(sent_pkts) - sent0))
  if [ "$local_path" = 1 ]; then
    # The frames went through shared memory: the interface sent next to nothing (neighbour and router
    # messages), while the device sent thousands.
    if [ $dsent -ge 100 ] && [ $((dtx * 10)) -lt $dsent ]; then
      echo "  ok: same-host path: $dsent RoCE frames sent, va sent $dtx packets"
    else
      echo "  FAIL: same-host path: $dsent RoCE frames sent, va sent $dtx packets (want >= 100, and a tenth of that at most through va)"
      fail=1
    fi
  elif [ $dsent -ge 100 ] && [ $dtx -ge $dsent ]; then
    echo "  ok: same-host path off ($local_path): $dsent RoCE frames sent, va sent $dtx packets"
  else
    echo "  FAIL: same-host path off ($local_path): $dsent RoCE frames sent, va sent $dtx packets (want >= 100, all through va)"
    fail=1
  fi
  if [ "${URXE_TEST_PCAP:-0}" = 1 ]; then
    unset URXE_PCAP
    check_captures "$devctl" "$tmp/pcap" 2 >"$tmp/captures"
    sed 's/^/  /' "$tmp/captures"
  elif [ "${URXE_TEST_PCAP:-0}" = server ]; then
    check_captures "$devctl" "$tmp/pcap" 1 >"$tmp/captures"
    sed 's/^/  /' "$tmp/captures"
    b=$(sed -n 's/.*frames sent (\([0-9]*\) of them batches).*/\1/p' "$tmp/client" | awk '{ s += $1 } END { print s + 0 }')
    echo "  client: $b batch frames sent"
    batches=$((batches + b))
  fi
done
if [ "${URXE_TEST_PCAP:-0}" = server ]; then
  if [ "$batches" -gt 0 ]; then echo "ok: $batches batch frames in all, recorded by the server as their packets"
  else echo "FAIL: no batch frames sent (the capture check above did not see any)"; fail=1; fi
fi
echo "$# apps in $(elapsed "$t_all")"
exit $fail
