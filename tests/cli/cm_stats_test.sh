#!/bin/sh
# The CM service's traffic where users look for it, end to end: rping between two network namespaces (urxe0
# on each side of a veth, each side its own run directory, the server's device with --pcap). Checks:
#  - `urxe stats --json` has the kernel's per-port CM groups (cm_tx_msgs, cm_rx_msgs, cm_tx_retries,
#    cm_rx_duplicates) with one REQ/REP/RTU/DREQ/DREP each way as rping sends them, and the text output
#    lists them; the same numbers are in sysfs at ports/1/cm_*/<message>;
#  - the server device's live capture holds the CM service's MADs (its own ring of files next to rping's)
#    and rping's RC frames, every frame passing `urxe pcap decode --strict`;
#  - fault rules act on the CM services' MADs as on an app's frames: rules added by `urxe fault add` while
#    the services run (each takes its rule at once: its log line) lose the client's first REQ and duplicate
#    the server's first REP; rping still connects, the REQ resent after its timeout (4.6 s), each rule's
#    hits (1) counted in `urxe fault list` and the service's own counters file (`urxe stats -p`: comm
#    "urxe", QPNs from 1), the service's capture marking the REP's copy.
#   usage: cm_stats_test.sh URXE PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
. "$(dirname "$0")/../lib/check.sh"
netns_require_root
command -v rping >/dev/null || { echo "SKIP: rping (rdmacm-utils) not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
command -v tshark >/dev/null || { echo "SKIP: tshark not installed"; exit 77; }
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

# --- fault rules on the CM services' MADs, added while both services run (idle exit after 60 s)
fault() {  # fault NS RUN_DIR ARGS
  _ns=$1 _run=$2
  shift 2
  ip netns exec "$_ns" env URXE_RUN_DIR="$_run" "$urxe" fault "$@"
}
fault $b "$tmp/runB" add urxe0 dir tx class cm:req first 1 drop >/dev/null
fault $a "$tmp/runA" add urxe0 dir tx class cm:rep first 1 duplicate >/dev/null
# shellcheck disable=SC2317  # called through netns_wait_for
took_rule() { grep -q "urxe0: fault rules: 1 rule(s) in force" "$1"/cm/*.log; }
netns_wait_for 2 took_rule "$tmp/runB" && ok "the client's CM service took its rule" ||
  bad "the client's CM service did not take its rule: $(cat "$tmp/runB"/cm/*.log)"
netns_wait_for 2 took_rule "$tmp/runA" && ok "the server's CM service took its rule" ||
  bad "the server's CM service did not take its rule: $(cat "$tmp/runA"/cm/*.log)"
netns_urxe_side_in "$tmp/runA" $a va "$tmp/server2" "$urxe" "$so" "" rping -s -a 10.91.0.1 -C 3 &
srv=$!
netns_wait_for 20 listening || bad "rping -s (with rules): not listening after 20 s"
t0=$(date +%s%N)
netns_urxe_side_in "$tmp/runB" $b vb "$tmp/client2" "$urxe" "$so" "" rping -c -a 10.91.0.1 -C 3 -v
expect_rc "rping client, its first REQ lost and the REP duplicated" 0 $?
took=$((($(date +%s%N) - t0) / 1000000))
wait $srv
expect_rc "  and its server" 0 $?
[ "$took" -ge 4000 ] && ok "  connected after the REQ's resend ($took ms)" || bad "  connected after $took ms"
# The services publish their rules' counters once a second.
# shellcheck disable=SC2317  # called through netns_wait_for
hits_of() { ip netns exec "$1" env URXE_RUN_DIR="$2" "$urxe" fault list urxe0 --json | jq -c '[.rules[] | [.hits, .applied]]'; }
# shellcheck disable=SC2317
one_hit() { [ "$(hits_of "$1" "$2")" = "[[1,1]]" ]; }
netns_wait_for 3 one_hit $b "$tmp/runB" && ok "  fault list: the REQ rule hit once (client)" ||
  bad "  client's rule counters: $(hits_of $b "$tmp/runB")"
netns_wait_for 3 one_hit $a "$tmp/runA" && ok "  fault list: the REP rule hit once (server)" ||
  bad "  server's rule counters: $(hits_of $a "$tmp/runA")"
# shellcheck disable=SC2317
req_counts() { stats $b "$tmp/runB" --json | jq -c '[.cm.cm_tx_msgs.req, .cm.cm_tx_retries.req]'; }
# shellcheck disable=SC2317
req_resent() { [ "$(req_counts)" = "[3,1]" ]; }
netns_wait_for 3 req_resent && ok "  the client's REQ sent twice more, one a retry" ||
  bad "  the client's REQ counts (sent, retries): $(req_counts)"
jc=$(stats $b "$tmp/runB" -p --json)
check "  the client's service: its own counters file with the rule's hit" '^\["urxe",1,1\]$' \
  "$(printf '%s' "$jc" | jq -c '[.processes[] | select(.alive and .comm == "urxe")][0] | [.comm, .qpn_base, .faults[0].hits]')"
c=$(for f in "$tmp"/pcap/*_urxe_*; do tshark -r "$f" -T fields -e frame.comment 2>/dev/null; done)
check "  the server's service capture marks the REP's copy" 'pid [0-9]+ \(urxe\) out, .*fault rule 1: duplicate$' "$c"
exit $fail
