#!/bin/sh
# Unmodified verbs applications between two network namespaces joined by a veth pair, urxe0 on each side
# (each side with its own mount namespace: its own /dev/infiniband and run directory), over the port
# `urxe link add` picks by default. Server in ns A, client in ns B; both must exit 0 and print their result.
#   usage: apps_2ns.sh DEVCTL PROVIDER_SO "APP ARGS" ["APP ARGS" ...]
#   (the client gets the server's address appended; the veth MTU is $URXE_TEST_MTU, default 1500)
# URXE_TEST_FLAP=SECS: once each client run's RoCE traffic flows (100 frames from the client counted by the
# server's ingress rule), the client's interface goes down for SECS (its carrier and the server's); the flap
# must fall inside the run. URXE_TEST_CLIENT_FAILS=REGEX: the client must fail instead, printing REGEX (e.g.
# a completion error), and the server may fail too.
# URXE_TEST_SHARED_RUN=1: both sides share one run directory (as two namespaces of a host using the default
# /run/urxe do), the server's device urxe0 on va and the client's urxe1 on vb (the client's command and
# $UCX_NET_DEVICES with urxe0 renamed), so the frames between them take the same-host path: each app
# must send at most a tenth of its frames through the veth (RoCE frames counted by the nftables ingress
# rule `urxe link add` installs on each end) while the devices' counters show the traffic. UCT tests
# (ucx_perftest -d) are skipped there: ucx_perftest hands the client's device name to the server, and
# the two devices cannot share a name in one run directory (the 1ns matrix runs them on the path).
# URXE_TEST_LINK_OPTS: more `urxe link add` options for both devices. URXE_TEST_PCAP=1: both processes
# capture (URXE_PCAP), every frame passing `urxe pcap decode --strict`. URXE_TEST_NO_USO=1: both veth ends
# without UDP segmentation offload (as a VM's virtio-net, many NICs), so the socket port's UDP GSO runs are
# cut by the sending kernel; both sides' notices must say so. URXE_TEST_ONE_CPU=1: each side's app (and so its
# progress thread) confined to one CPU of its own (taskset; CPU 0 for both on a one-CPU machine), as in a
# one-vCPU guest or a container pinned to a core: the progress thread's one-CPU rules.
set -u
. "$(dirname "$0")/../lib/netns.sh"
. "$(dirname "$0")/../lib/check.sh"
netns_require_root
devctl=$1; so=$2; shift 2
mkdir -p /dev/infiniband
a=urxeA$$; b=urxeB$$
netns_tmpdir tmp urxe-apps || exit 1
netns_pair $a $b va vb 10.88.0.1/24 10.88.0.2/24 || exit 1
if [ "${URXE_TEST_NO_USO:-0}" = 1 ]; then
  ip netns exec $a ethtool -K va tx-udp-segmentation off >/dev/null || exit 1
  ip netns exec $b ethtool -K vb tx-udp-segmentation off >/dev/null || exit 1
fi

shared=${URXE_TEST_SHARED_RUN:-0}
run=""
if [ "$shared" = 1 ]; then
  run="$tmp/run"
  mkdir -p "$run"
fi
side() {  # side NS IFACE OUTFILE CMD...
  _sd_ns=$1 _sd_if=$2 _sd_out=$3
  shift 3
  netns_urxe_side_in "$run" "$_sd_ns" "$_sd_if" "$_sd_out" "$devctl" "$so" "${URXE_TEST_LINK_OPTS:-}" "$@"
}
roce_in() {  # roce_in NS IFACE: RoCE frames that came in through IFACE (the ingress drop's counter)
  _ri=$(ip netns exec "$1" nft list table netdev "urxe_$2" 2>/dev/null |
    sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -1)
  echo "${_ri:-0}"
}
sent_pkts() {  # sent_pkts NS DEV
  ip netns exec "$1" env URXE_RUN_DIR="$run" "$devctl" stats "$2" --json |
    sed -n 's/.*"sent_pkts":\([0-9]*\).*/\1/p' | head -1
}

# shellcheck disable=SC2317  # called through netns_wait_for
traffic_or_end() {  # the client's RoCE traffic flows ($in0: RoCE frames in on va before it), or it ended
  [ "$(roce_in "$a" va)" -ge $((in0 + 100)) ] || ! kill -0 "$cli" 2>/dev/null
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

pin_a="" pin_b=""
if [ "${URXE_TEST_ONE_CPU:-0}" = 1 ]; then
  pin_a="taskset -c 0"
  pin_b="taskset -c $(($(nproc) > 1 ? 1 : 0))"
fi

fail=0
t_all=$(now)
for app in "$@"; do
  t0=$(now)
  capp=$app
  if [ "$shared" = 1 ]; then
    case $app in
      "ucx_perftest "*" -d "*)
        echo "skip: $app (a UCT test: the two devices would need one name)"
        continue ;;
    esac
    capp=$(echo "$app" | sed 's/urxe0/urxe1/g')
    if [ -e "$run/sys/class/infiniband/urxe1" ]; then
      ina0=$(roce_in $a va) inb0=$(roce_in $b vb) sa0=$(sent_pkts $a urxe0) sb0=$(sent_pkts $b urxe1)
    else
      ina0=0 inb0=0 sa0=0 sb0=0
    fi
  fi
  if [ "${URXE_TEST_PCAP:-0}" = 1 ]; then
    rm -rf "$tmp/pcap"
    mkdir -p "$tmp/pcap"
    chmod 777 "$tmp/pcap"
    export URXE_PCAP="$tmp/pcap"
  fi
  try=1
  while :; do
    # shellcheck disable=SC2086
    side $a va "$tmp/server" $pin_a $app &
    srv=$!
    netns_wait_listen $srv $a  # the server listens on TCP 18515 (ibverbs-utils, perftest)
    in0=$(roce_in $a va)
    (
      export NETNS_URXE_DEV=urxe$shared
      [ -z "${UCX_NET_DEVICES:-}" ] || export UCX_NET_DEVICES="$(echo "$UCX_NET_DEVICES" | sed "s/urxe0/urxe$shared/")"
      # shellcheck disable=SC2086
      side $b vb "$tmp/client" $pin_b $capp 10.88.0.1
    ) &
    cli=$!
    flap_missed=0
    if [ -n "${URXE_TEST_FLAP:-}" ]; then
      # The run under way: RoCE frames from the client reached va (perftest's exchange before is TCP).
      netns_wait_for 30 traffic_or_end ||
        echo "  no RoCE traffic from the client 30 s into its run (frames in on va: $in0 -> $(roce_in $a va))"
      [ "$(roce_in $a va)" -ge $((in0 + 100)) ] && kill -0 $cli 2>/dev/null || flap_missed=1
      ip -n $b link set vb down
      sleep "$URXE_TEST_FLAP"  # the flap's length, which the test sets: a duration, not a wait for an event
      ip -n $b link set vb up
      [ -n "${URXE_TEST_CLIENT_FAILS:-}" ] || kill -0 $cli 2>/dev/null || flap_missed=1
    fi
    wait $cli
    crc=$?
    wait $srv
    src=$?
    why=$(known_app_race "$tmp/server" "$tmp/client")
    if [ $try = 1 ] && [ -z "${URXE_TEST_CLIENT_FAILS:-}" ] && [ $((crc + src)) -ne 0 ] && [ -n "$why" ]; then
      echo "RETRY: $app: $why"
      try=2
      continue
    fi
    break
  done
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
  if [ "${URXE_TEST_NO_USO:-0}" = 1 ]; then
    cut="with UDP GSO (cut by the kernel)"
    if grep -q "$cut" "$tmp/server" && grep -q "$cut" "$tmp/client"; then
      echo "  ok: both ports' batches cut by the kernel"
    else
      echo "  FAIL: the ports' notices do not say their batches are cut by the kernel"
      grep -h "kernel-socket port" "$tmp/server" "$tmp/client" | sed 's/^/  /'
      fail=1
    fi
  fi
  if [ "${URXE_TEST_PCAP:-0}" = 1 ]; then
    unset URXE_PCAP
    check_captures "$devctl" "$tmp/pcap" 2 >"$tmp/captures"
    sed 's/^/  /' "$tmp/captures"
  fi
  if [ "$shared" = 1 ]; then
    # Through shared memory: next to no RoCE frame crossed the veth, while the devices sent thousands.
    din=$(($(roce_in $a va) - ina0 + $(roce_in $b vb) - inb0))
    dsent=$(($(sent_pkts $a urxe0) - sa0 + $(sent_pkts $b urxe1) - sb0))
    if [ $dsent -ge 100 ] && [ $((din * 10)) -lt $dsent ]; then
      echo "  ok: same-host path: $dsent RoCE frames sent, $din of them through the veth"
    else
      echo "  FAIL: same-host path: $dsent RoCE frames sent, $din of them through the veth (want >= 100, and a tenth of that at most through the veth)"
      fail=1
    fi
  fi
done
echo "$# apps in $(elapsed "$t_all")"
exit $fail
