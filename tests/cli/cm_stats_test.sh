#!/bin/sh
# The CM service's traffic where users look for it, end to end: rping between two network namespaces (urxe0
# on each side of a veth, each side its own run directory, the server's device with --pcap). Checks:
#  - `urxe stats --json` has the kernel's per-port CM groups (cm_tx_msgs, cm_rx_msgs, cm_tx_retries,
#    cm_rx_duplicates) with one REQ/REP/RTU/DREQ/DREP each way as rping sends them, and the text output
#    lists them; the same numbers are in sysfs at ports/1/cm_*/<message>;
#  - the server device's live capture holds the CM service's MADs (its own ring of files next to rping's)
#    and rping's RC frames, every frame passing `urxe pcap decode --strict`.
#   usage: cm_stats_test.sh URXE PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
. "$(dirname "$0")/../lib/check.sh"
netns_require_root
command -v rping >/dev/null || { echo "SKIP: rping (rdmacm-utils) not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
urxe=$1; so=$2
mkdir -p /dev/infiniband
a=ucmA$$; b=ucmB$$
netns_tmpdir tmp urxe-cmstats || exit 1
mkdir -m 777 "$tmp/pcap"
netns_pair $a $b va vb 10.91.0.1/24 10.91.0.2/24 || exit 1

stats() {  # stats NS RUN_DIR [ARGS]
  _ns=$1 _run=$2
  shift 2
  ip netns exec "$_ns" env URXE_RUN_DIR="$_run" "$urxe" stats urxe0 "$@"
}
got() { printf '%s' "$1" | jq -c "[.cm.$2.req, .cm.$2.rep, .cm.$2.rtu, .cm.$2.dreq, .cm.$2.drep]"; }

netns_urxe_side_in "$tmp/runA" $a va "$tmp/server" "$urxe" "$so" "--pcap $tmp/pcap" rping -s -a 10.91.0.1 -C 3 &
srv=$!
netns_at_exit "kill $srv 2>/dev/null"
# A client that comes before rping -s listens is rejected (REJ 8) and exits non-zero: wait for the listening
# id in A's CM service (which the server's rping starts), or for the server's end.
# shellcheck disable=SC2317  # called through netns_wait_for
listening() {
  ip netns exec "$a" env URXE_RUN_DIR="$tmp/runA" "$urxe" cm show 2>/dev/null | grep -q " state LISTEN " ||
    ! kill -0 "$srv" 2>/dev/null
}
if netns_wait_for 20 listening && kill -0 "$srv" 2>/dev/null; then ok "rping -s listens"
else bad "rping -s: no listening id in the CM service after 20 s (or it exited)"; fi
netns_urxe_side_in "$tmp/runB" $b vb "$tmp/client" "$urxe" "$so" "" rping -c -a 10.91.0.1 -C 3 -v
expect_rc "rping client" 0 $?
wait $srv
expect_rc "rping server" 0 $?
# The services mirror their counters into the trees once a second (when they changed): wait until both
# sides show the whole exchange (the checks below then read them again).
# shellcheck disable=SC2317  # called through netns_wait_for
mirrored() {
  _js=$(stats "$a" "$tmp/runA" --json 2>/dev/null) && _jc=$(stats "$b" "$tmp/runB" --json 2>/dev/null) &&
    [ "$(got "$_js" cm_rx_msgs)$(got "$_js" cm_tx_msgs)" = "[1,0,1,1,0][0,1,0,0,1]" ] &&
    [ "$(got "$_jc" cm_tx_msgs)$(got "$_jc" cm_rx_msgs)" = "[1,0,1,1,0][0,1,0,0,1]" ]
}
netns_wait_for 5 mirrored || echo "note: the CM counters are not all as expected 5 s after rping's end"

js=$(stats $a "$tmp/runA" --json)
jc=$(stats $b "$tmp/runB" --json)
# The client connects and disconnects first: it sends REQ, RTU, DREQ; the server REP and DREP.
check "server received REQ, RTU, DREQ" '^\[1,0,1,1,0\]$' "$(got "$js" cm_rx_msgs)"
check "server sent REP, DREP" '^\[0,1,0,0,1\]$' "$(got "$js" cm_tx_msgs)"
check "client sent REQ, RTU, DREQ" '^\[1,0,1,1,0\]$' "$(got "$jc" cm_tx_msgs)"
check "client received REP, DREP" '^\[0,1,0,0,1\]$' "$(got "$jc" cm_rx_msgs)"
check "no retries on a clean link" '^\[0,0,0,0,0\]$' "$(got "$jc" cm_tx_retries)"
check "text output lists the CM MADs" 'REQ +0 +1 +0 +0' "$(stats $a "$tmp/runA")"
port=$tmp/runA/sys/class/infiniband/urxe0/ports/1
check "sysfs cm_rx_msgs/req" '^1$' "$(cat "$port/cm_rx_msgs/req" 2>&1)"
check "sysfs cm_tx_msgs/rep" '^1$' "$(cat "$port/cm_tx_msgs/rep" 2>&1)"

# The capture: the CM service's file (comm "urxe") and rping's.
svc=$(ls "$tmp/pcap" | grep '_urxe_' | head -1)
app=$(ls "$tmp/pcap" | grep '_rping_' | head -1)
[ -n "$svc" ] && ok "the CM service's capture file ($svc)" || bad "no capture file of the CM service in $(ls "$tmp/pcap")"
[ -n "$app" ] && ok "rping's capture file ($app)" || bad "no capture file of rping"
if [ -n "$svc" ]; then
  d=$("$urxe" pcap decode --strict "$tmp/pcap/$svc")
  expect_rc "the service's capture decodes strictly" 0 $?
  check "it holds the REQ received" 'CM REQ' "$d"
  check "and the REP sent" 'CM REP' "$d"
fi
if [ -n "$app" ]; then
  d=$("$urxe" pcap decode --strict "$tmp/pcap/$app")
  expect_rc "rping's capture decodes strictly (flushed at exit)" 0 $?
  check "it holds RC traffic" 'RC (SEND|RDMA_READ|RDMA_WRITE)' "$d"
fi
exit $fail
