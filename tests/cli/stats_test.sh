#!/bin/sh
# `urxe stats` and the sysfs hw_counters mirror, end to end: ibv_rc_pingpong between two network namespaces
# (veth pair, urxe0 on each side, each side with its own /dev/infiniband and run directory). Checks:
#  - while the server waits for its client, frames injected with Scapy (bad ICRC; good ICRC to a QPN with no
#    QP) show up live in `urxe stats --json` as rx_drop_icrc / rx_drop_qpn, and in sysfs hw_counters by the
#    provider's own mirroring (no `urxe stats` run in between);
#  - after both apps exited, the counters are still there: each side sent what the other received, the
#    pingpong's packets are all counted (N SENDs and N ACKs each way for N iterations of 64 bytes: rc_pingpong
#    posts one SEND per iteration per side, each acknowledged; retransmissions, if any, are counted as
#    duplicate_request on the other side and subtracted), rdma_sends/rdma_recvs = N, no process listed;
#  - every sysfs hw_counters/<name> file holds the JSON value; rxe's 15 names are all there;
#  - an app killed with SIGKILL keeps its counts (folded into the device total by the next reader).
#   usage: stats_test.sh URXE PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v ibv_rc_pingpong >/dev/null || { echo "SKIP: ibv_rc_pingpong (ibverbs-utils) not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
/usr/bin/python3 -c 'import scapy.contrib.roce' 2>/dev/null || { echo "SKIP: scapy missing for /usr/bin/python3"; exit 77; }
urxe=$1; so=$2
N=100
mkdir -p /dev/infiniband
a=ustA$$; b=ustB$$
netns_tmpdir tmp urxe-stats || exit 1
srv=
netns_at_exit '[ -n "$srv" ] && kill "$srv" 2>/dev/null'
netns_pair $a $b va vb 10.89.0.1/24 10.89.0.2/24 || exit 1  # both ends up (carrier) before anything is sent

fail=0
check() {  # check WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok: $1 = $2"; else echo "FAIL: $1 = $2, want $3"; fail=1; fi
}
stats() {  # stats RUN_DIR [ARGS]: urxe stats of urxe0 there
  run=$1; shift
  URXE_RUN_DIR=$run "$urxe" stats urxe0 "$@"
}
hw() { cat "$1/sys/class/infiniband/urxe0/ports/1/hw_counters/$2" 2>/dev/null; }

side() {  # side NS IFACE RUN_DIR OUTFILE CMD...: each side's run directory stays, for urxe stats
  _sd_ns=$1 _sd_if=$2 _sd_run=$3 _sd_out=$4
  shift 4
  netns_urxe_side_in "$_sd_run" "$_sd_ns" "$_sd_if" "$_sd_out" "$urxe" "$so" "" "$@"
}

app="ibv_rc_pingpong -d urxe0 -g 1 -n $N -s 64"
# shellcheck disable=SC2086
side $a va "$tmp/runA" "$tmp/server" stdbuf -oL $app &  # line-buffered: its QPN is read below
srv=$!
# The server has the device open once its counters file appears.
live=0
for i in $(seq 100); do
  live=$(stats "$tmp/runA" --json 2>/dev/null | jq '[.processes[] | select(.alive)] | length')
  [ "${live:-0}" -ge 1 ] && break
  sleep 0.1
done
check "live processes on the server's device" "$live" 1

# Frames the server's engine must drop, each counted once: 7 with a bad ICRC, 5 to a QPN in its block with
# no QP (the server's one QP sits at a random place in block 0x11..0x1010: take its neighbour).
mac=$(ip -n $a -o link show va | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
qpn=
for i in $(seq 100); do
  qpn=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-fA-F]*\).*/\1/p' "$tmp/server" | head -1)
  [ -n "$qpn" ] && break
  sleep 0.1
done
[ -n "$qpn" ] || { echo "FAIL: the server printed no QPN"; fail=1; qpn=17; }
noqp=$((qpn == 0x1010 ? qpn - 1 : qpn + 1))
ip netns exec $b /usr/bin/python3 - "$mac" "$noqp" <<'EOF' || { echo "FAIL: injecting frames"; fail=1; }
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp
from scapy.contrib.roce import BTH
def frame(qpn, psn):
    p = (Ether(dst=sys.argv[1]) / IP(src="10.89.0.2", dst="10.89.0.1", flags="DF") /
         UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=4, dqpn=qpn, psn=psn) / Raw(b"x" * 16))
    return bytes(p)
frames = []
for i in range(7):
    f = bytearray(frame(0x11, i))
    f[-1] ^= 0xff  # ICRC
    frames.append(Ether(bytes(f)))
frames += [Ether(frame(int(sys.argv[2]), i)) for i in range(5)]
sendp(frames, iface="vb", verbose=False)
EOF

# The provider mirrors its counters into sysfs within about a second of a change.
for i in $(seq 50); do
  [ "$(hw "$tmp/runA" rx_drop_icrc)" = 7 ] && [ "$(hw "$tmp/runA" rx_drop_qpn)" = 5 ] && break
  sleep 0.1
done
check "sysfs rx_drop_icrc (mirrored by the running app)" "$(hw "$tmp/runA" rx_drop_icrc)" 7
check "sysfs rx_drop_qpn (mirrored by the running app)" "$(hw "$tmp/runA" rx_drop_qpn)" 5
js=$(stats "$tmp/runA" --json)
check "live rx_drop_icrc" "$(echo "$js" | jq .counters.rx_drop_icrc)" 7
check "live rx_drop_qpn" "$(echo "$js" | jq .counters.rx_drop_qpn)" 5
check "live rcvd_pkts (dropped frames are not received packets, as rxe)" "$(echo "$js" | jq .counters.rcvd_pkts)" 0
check "live per-process rx_drop_icrc" "$(echo "$js" | jq '.processes[0].counters.rx_drop_icrc')" 7

# shellcheck disable=SC2086
side $b vb "$tmp/runB" "$tmp/client" $app 10.89.0.1
crc=$?
wait $srv
src=$?
srv=
if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
  echo "FAIL: $app (server rc $src, client rc $crc)"
  sed 's/^/  server: /' "$tmp/server"
  sed 's/^/  client: /' "$tmp/client"
  exit 1
fi

ja=$(stats "$tmp/runA" --json); jb=$(stats "$tmp/runB" --json)
echo "server: $ja"
echo "client: $jb"
c() { echo "$1" | jq ".counters.$2"; }
check "processes listed after exit (server)" "$(echo "$ja" | jq '.processes | length')" 0
check "processes listed after exit (client)" "$(echo "$jb" | jq '.processes | length')" 0
check "server sent_pkts = client rcvd_pkts" "$(c "$ja" sent_pkts)" "$(c "$jb" rcvd_pkts)"
check "client sent_pkts = server rcvd_pkts" "$(c "$jb" sent_pkts)" "$(c "$ja" rcvd_pkts)"
# Every sent packet is either new (one SEND or one ACK per iteration) or a resend the peer saw as duplicate.
check "server sent_pkts - client duplicate_request" \
  "$(($(c "$ja" sent_pkts) - $(c "$jb" duplicate_request)))" $((2 * N))
check "client sent_pkts - server duplicate_request" \
  "$(($(c "$jb" sent_pkts) - $(c "$ja" duplicate_request)))" $((2 * N))
for side_js in "$ja" "$jb"; do
  check "rdma_sends" "$(c "$side_js" rdma_sends)" $N
  check "rdma_recvs" "$(c "$side_js" rdma_recvs)" $N
done
check "server rx_drop_icrc after exit" "$(c "$ja" rx_drop_icrc)" 7
check "client rx_drop_icrc" "$(c "$jb" rx_drop_icrc)" 0

# sysfs: every counter's file holds the JSON value; rxe's names are all present.
for run in "$tmp/runA" "$tmp/runB"; do
  js=$(stats "$run" --json)
  bad=0
  for name in $(echo "$js" | jq -r '.counters | keys[]'); do
    [ "$(hw "$run" "$name")" = "$(echo "$js" | jq ".counters.$name")" ] || { echo "  $name: sysfs $(hw "$run" "$name")"; bad=1; }
  done
  check "sysfs hw_counters = urxe stats ($run)" $bad 0
  missing=
  for name in sent_pkts rcvd_pkts duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err \
      ack_deferred retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err link_downed rdma_sends \
      rdma_recvs lifespan; do
    [ -n "$(hw "$run" $name)" ] || missing="$missing $name"
  done
  check "rxe hw_counters files missing" "${missing:-none}" none
done

# Per-QP counters, and an app killed with SIGKILL. A second server waits with its QP in INIT; 3 frames with a
# bad ICRC (no QP: device only) and 2 good SENDs to its QP (dropped for the QP's state: counted for the QP
# too, which the app publishes within about a second). Killed, it never folds its counters at close: they
# stay in its file, and the next reader with write access (this urxe stats) folds them into the total, once.
# shellcheck disable=SC2086
side $a va "$tmp/runA" "$tmp/server2" stdbuf -oL $app &
srv=$!
pid=
for i in $(seq 100); do
  pid=$(stats "$tmp/runA" --json 2>/dev/null | jq '.processes[] | select(.alive) | .pid')
  [ -n "$pid" ] && break
  sleep 0.1
done
qpn=
for i in $(seq 100); do  # its QP sits at a random place in its block: read it from its output
  qpn=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-fA-F]*\).*/\1/p' "$tmp/server2" | head -1)
  [ -n "$qpn" ] && break
  sleep 0.1
done
qpn=$((${qpn:-17}))
ip netns exec $b /usr/bin/python3 - "$mac" "$qpn" <<'EOF' || { echo "FAIL: injecting frames"; fail=1; }
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp
from scapy.contrib.roce import BTH
good = bytes(Ether(dst=sys.argv[1]) / IP(src="10.89.0.2", dst="10.89.0.1", flags="DF") /
             UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=4, dqpn=int(sys.argv[2]), psn=0) / Raw(b"x" * 16))
bad = bytearray(good)
bad[-1] ^= 0xff
sendp([Ether(bytes(bad))] * 3 + [Ether(good)] * 2, iface="vb", verbose=False)
EOF
qp=
for i in $(seq 50); do
  qp=$(stats "$tmp/runA" --json | jq -c '.processes[0].qps[0]')
  [ "$(echo "$qp" | jq .counters.rx_drop_qpn)" = 2 ] && break
  sleep 0.1
done
check "QP of the waiting server" "$(echo "$qp" | jq -r '"\(.qpn) \(.type) \(.state)"')" "$qpn RC INIT"
check "its rx_drop_qpn (SENDs before RTR)" "$(echo "$qp" | jq .counters.rx_drop_qpn)" 2
check "its rx_drop_icrc (bad frames reach no QP)" "$(echo "$qp" | jq .counters.rx_drop_icrc)" null
stats "$tmp/runA" -p | grep -Eq "QP $(printf '0x%06x' "$qpn") RC INIT: rx_drop_qpn=2" || { echo "FAIL: -p lacks the QP line"; fail=1; }
if [ -n "$pid" ]; then kill -9 "$pid"; else echo "FAIL: second server not seen"; fail=1; fi
wait $srv
srv=
js=$(stats "$tmp/runA" --json)
check "rx_drop_icrc after the second server was killed" "$(echo "$js" | jq .counters.rx_drop_icrc)" 10
check "processes listed after the kill (folded)" "$(echo "$js" | jq '.processes | length')" 0
check "rx_drop_qpn after the kill" "$(echo "$js" | jq .counters.rx_drop_qpn)" 7
check "rx_drop_icrc stays after the fold" "$(stats "$tmp/runA" --json | jq .counters.rx_drop_icrc)" 10

# Text output and a bounded --watch.
out=$(stats "$tmp/runA" --watch 0.1 --count 2)
check "--watch --count 2 rounds" "$(echo "$out" | grep -c '^urxe0:')" 2
echo "$out" | grep -Eq "rx_drop_icrc +10( |$)" || { echo "FAIL: text output lacks rx_drop_icrc 10"; echo "$out"; fail=1; }
URXE_RUN_DIR=$tmp/runA "$urxe" stats nosuchdev >/dev/null 2>&1
check "exit status for an unknown device" $? 1
exit $fail
