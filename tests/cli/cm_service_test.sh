#!/bin/sh
# `urxe cm`, the CM service, in private mount + network namespaces with urxe0 on a veth (va, 10.93.0.1; its
# peer vb, 10.93.0.2, injects frames): one instance per namespace and run directory, its files and modes;
# the socket speaks cm/protocol.h (tests/cli/cm_client.py: Hello -> eventfd, CREATE_ID/GET_EVENT/DESTROY_ID,
# malformed input closes the connection); frames to QP1 of urxe0 are taken or dropped by reason and counted
# in `urxe cm show`; SIGTERM removes the socket and the pid file; in the background it detaches only once
# the socket listens and exits by itself after --idle-exit.
# The daemon's route lookups (cm_route_probe, devices on va and vc; vc's peer vd, 10.94.0.2, in a namespace
# of its own, the gateway to 10.95.0.0/24): local, foreign, routed, unresolvable and unroutable addresses.
# The loop's own paths around a scripted core (cm_echo_daemon): timer -> event -> eventfd, GET_EVENT; each
# MAD answered from QP1 through the port (captured on vb: rxe's source port, UD SEND_ONLY from QP1 with the
# GSI Q_Key and a good ICRC), and a device's MAD to itself looping back through its own port.
#   usage: cm_service_test.sh URXE CM_ROUTE_PROBE CM_ECHO_DAEMON
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
/usr/bin/python3 -c 'import scapy.contrib.roce' 2>/dev/null ||
  { echo "SKIP: scapy missing for /usr/bin/python3"; exit 77; }
netns_private -t 100 "$0" "$@"
U=$1 P=$2 E=$3
here=$(cd "$(dirname "$0")" && pwd)
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH
. "$(dirname "$0")/../lib/check.sh"

netns_private_veth URXE_RUN_DIR urxe-cm-test 10.93.0.1/24 10.93.0.2/24 || exit 1
export URXE_RUN_DIR
out=$("$U" link add urxe0 netdev va --port socket 2>&1); expect_rc "link add urxe0 netdev va" 0 $?
ns=$(stat -L -c '%d:%i' /proc/self/ns/net)
dir=$URXE_RUN_DIR/cm
sock=$dir/$ns.sock pidf=$dir/$ns.pid
log=$URXE_RUN_DIR/cm-foreground.log

srv=
netns_at_exit '[ -z "$srv" ] || kill "$srv" 2>/dev/null'
"$U" cm --foreground --idle-exit 0 2>"$log" &
srv=$!
i=0
while [ $i -lt 100 ] && [ ! -S "$sock" ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ] && ok "socket $sock listens" || bad "no socket $sock after 5 s"
check "pid file holds the service's pid" "^$srv\$" "$(cat "$pidf" 2>&1)"
check "cm/ is mode 1777, the socket 0666" "^1777 666\$" "$(stat -c %a "$dir" "$sock" | tr '\n' ' ' | sed 's/ $//')"

out=$("$U" cm 2>&1); expect_rc "a second 'urxe cm'" 0 $?
check "  says already running, with the pid" "^urxe cm: already running \(pid $srv\)\$" "$out"
out=$("$U" cm --idle-exit 1 2>&1); expect_rc "a second one in the background" 0 $?
check "  says so too" "already running \(pid $srv\)" "$out"
kill -0 "$srv" 2>/dev/null && ok "the first one still runs" || bad "the first one died"

/usr/bin/python3 "$here/cm_client.py" "$sock" "$U" || fail=1

show() { "$U" cm show 2>&1; }
count() { show | awk -v n="$1" '$1 == n {print $2}'; }
out=$(show); expect_rc "urxe cm show" 0 $?
check "  lists urxe0 on va with its port" \
  "^  urxe0  netdev va ifindex [0-9]+ mtu 1500 up, [0-9]+ GIDs, node_guid [0-9a-f:]+\$" "$out"
for t in REQ MRA REJ REP RTU DREQ DREP SIDR_REQ SIDR_REP; do
  check "  CM MADs $t sent and received (none yet)" "^  $t +0 +0\$" "$out"
done
check "  no id left" "^ids: 0\$" "$out"

# Frames to QP1 of urxe0: from vb 3 good CM MADs (REQ), 2 with a bad ICRC, 1 with another Q_Key, 1 with a
# short payload, 1 RC SEND to QP1, and 2 good MADs to QP 2 that the port's filter keeps away; 1 more good
# MAD from va itself to its own MAC.
mac=$(ip -o link show va | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
/usr/bin/python3 - "$mac" <<'EOF' || bad "injecting frames"
import struct, sys
from scapy.all import Ether, IP, UDP, Raw, sendp
from scapy.contrib.roce import BTH
def mad(attr=0x0010, tid=1):
    # MAD header: base version 1, class CM (7), class version 2, method Send, status, class specific, TID,
    # attribute id, reserved, attribute modifier; then 232 data bytes.
    return struct.pack(">BBBBHHQHHI", 1, 7, 2, 3, 0, 0, tid, attr, 0, 0) + bytes(232)
def frame(payload, qpn=1, qkey=0x80010000, opcode=0x64, deth=True):
    ext = struct.pack(">II", qkey, 1) if deth else b""
    return bytes(Ether(dst=sys.argv[1]) / IP(src="10.93.0.2", dst="10.93.0.1", flags="DF") /
                 UDP(sport=0xd872, dport=4791, chksum=0) / BTH(opcode=opcode, dqpn=qpn, psn=7) /
                 Raw(ext + payload))
frames = [frame(mad(tid=t)) for t in range(3)]
for t in range(2):
    f = bytearray(frame(mad(tid=10 + t)))
    f[-1] ^= 0xff
    frames.append(bytes(f))
frames.append(frame(mad(), qkey=0x11111111))
frames.append(frame(mad()[:128]))
frames.append(frame(mad(), opcode=0x04, deth=False))
frames += [frame(mad(tid=20 + t), qpn=2) for t in range(2)]
sendp([Ether(f) for f in frames], iface="vb", verbose=False)
# Sent on va itself to va's MAC, as another process using urxe0 sends (its frames go out through the qdisc
# layer, so urxe0's packet sockets see them as outgoing frames to their own MAC). An RTU of no connection,
# which the CM drops without an answer (an answer to a REQ would come back to us through the same path).
f = Ether(frame(mad(attr=0x0014, tid=30)))
f.src = sys.argv[1]
sendp(f, iface="va", verbose=False)
EOF
i=0
while [ $i -lt 50 ] && [ "$(count rx_mads)" != 4 ]; do sleep 0.1; i=$((i + 1)); done
check "4 good MADs to QP1 reach the CM (rx_mads; 1 sent on va to its own MAC)" "^4\$" "$(count rx_mads)"
check "2 with a bad ICRC dropped (rx_drop_icrc)" "^2\$" "$(count rx_drop_icrc)"
check "1 with another Q_Key dropped (rx_drop_qkey)" "^1\$" "$(count rx_drop_qkey)"
check "1 short MAD dropped (rx_drop_length)" "^1\$" "$(count rx_drop_length)"
check "1 RC SEND to QP1 dropped (rx_drop_opcode; QP 2's frames never reach the service)" "^1\$" \
  "$(count rx_drop_opcode)"
check "nothing unparsable (rx_drop_parse)" "^0\$" "$(count rx_drop_parse)"
out=$(show)
check "the CM counts the 3 REQs received" "^  REQ +0 +3\$" "$out"
check "  and the RTU" "^  RTU +0 +1\$" "$out"
check "  answers each REQ (nobody listens) with a REJ" "^  REJ +3 +0\$" "$out"
check "  sent through the port (tx_frames 3)" "^  tx_frames +3\$" "$out"

# Route lookups, as the service asks them (devices: 0 on va, 1 on vc).
peer=urxecmpeer$$
ip netns add $peer || bad "ip netns add $peer"
netns_at_exit "ip netns del $peer 2>/dev/null"
ip link add vc type veth peer name vd netns $peer && ip addr add 10.94.0.1/24 dev vc && ip link set vc up &&
  ip -n $peer addr add 10.94.0.2/24 dev vd && ip -n $peer link set vd up && ip -n $peer link set lo up &&
  ip route add 10.95.0.0/24 via 10.94.0.2 || bad "peer namespace set-up"
netns_wait_up vc
vamac=$(ip -o link show va | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
vdmac=$(ip -n $peer -o link show vd | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
route() { "$P" va,vc "$@" 2>&1; }
check "route to urxe0's own address: resolved to its own MAC (loops back)" \
  "^resolved device 0 src ::ffff:10.93.0.1 dmac $vamac\$" "$(route 10.93.0.1)"
check "route to vb's address (local, not a urxe device): not_urxe" "^not_urxe " "$(route 10.93.0.2)"
check "route to 127.0.0.1: not_urxe" "^not_urxe " "$(route 127.0.0.1)"
check "route to the peer, first look: pending (ARP triggered)" "^pending device 1 " "$(route 10.94.0.2)"
check "route to the peer: resolved on device 1 with vd's MAC, vc's address as source" \
  "^resolved device 1 src ::ffff:10.94.0.1 dmac $vdmac\$" "$(route 10.94.0.2 --wait 3000)"
check "route through the peer as gateway: its MAC" "^resolved device 1 src ::ffff:10.94.0.1 dmac $vdmac\$" \
  "$(route 10.95.0.7 --wait 3000)"
check "route from a given source keeps it" "^resolved device 1 src ::ffff:10.93.0.1 dmac $vdmac\$" \
  "$(route 10.94.0.2 10.93.0.1)"
check "route to a host nobody answers for: pending" "^pending device 1 " "$(route 10.94.0.77 --wait 300)"
check "route with no route at all: unreachable" "^unreachable " "$(route 10.99.0.1)"

# va down for a second: the service must not spin on its packet socket's error, and takes frames again
# once va is back up.
cpu() { awk '{print $14 + $15}' "/proc/$srv/stat"; }
# shellcheck disable=SC2317  # called through netns_wait_for
seen_down() { show | grep -qE "^  urxe0  netdev va .* down,"; }
ip link set va down
if netns_wait_for 5 seen_down; then ok "va down: the service shows urxe0 down"
else bad "va down: urxe0 not down after 5 s"; fi
c0=$(cpu)
sleep 1  # the window the CPU ticks are counted over (a spin would burn them): a duration, not a condition
c1=$(cpu)
ip link set va up
netns_wait_up va && netns_wait_up vb
check "va down for 1 s: the service stays idle (CPU ticks $c0 -> $c1, fewer than 20)" "^1\$" "$((c1 - c0 < 20))"
n0=$(count rx_mads)
/usr/bin/python3 - "$mac" <<'EOF' || bad "injecting a MAD after va came back"
import struct, sys
from scapy.all import Ether, IP, UDP, Raw, sendp
from scapy.contrib.roce import BTH
mad = struct.pack(">BBBBHHQHHI", 1, 7, 2, 3, 0, 0, 0x79, 0x0010, 0, 0) + bytes(232)
sendp(Ether(dst=sys.argv[1]) / IP(src="10.93.0.2", dst="10.93.0.1", flags="DF") /
      UDP(sport=0xd872, dport=4791, chksum=0) / BTH(opcode=0x64, dqpn=1, psn=9) /
      Raw(struct.pack(">II", 0x80010000, 1) + mad), iface="vb", verbose=False)
EOF
i=0
while [ $i -lt 30 ] && [ "$(count rx_mads)" = "$n0" ]; do sleep 0.1; i=$((i + 1)); done
check "  va up again: a MAD is received" "^$((n0 + 1))\$" "$(count rx_mads)"

# Devices follow the host: a new address is a new GID at once (rtnetlink), a new device of this namespace
# is picked up, another namespace's is not.
gids() { show | sed -n 's/^  urxe0 .* \([0-9][0-9]*\) GIDs.*/\1/p'; }
g0=$(gids)
ip addr add 10.93.0.9/24 dev va
i=0
while [ $i -lt 30 ] && [ "$(gids)" = "$g0" ]; do sleep 0.1; i=$((i + 1)); done
check "an address added to va: urxe0 has one GID more" "^$((g0 + 1))\$" "$(gids)"
out=$("$U" link add urxe1 netdev vc --port socket 2>&1); expect_rc "link add urxe1 netdev vc" 0 $?
out=$(ip netns exec $peer "$U" link add urxe2 netdev vd --port socket 2>&1)
expect_rc "link add urxe2 netdev vd in the peer namespace" 0 $?
i=0
while [ $i -lt 40 ] && ! show | grep -q "^  urxe1 "; do sleep 0.1; i=$((i + 1)); done
out=$(show)
check "  urxe1 is picked up" "^  urxe1  netdev vc ifindex [0-9]+ mtu 1500 up" "$out"
check_not "  urxe2 (another namespace's) is not" "urxe2" "$out"

kill -TERM "$srv"
wait "$srv"
expect_rc "SIGTERM: the service exits" 0 $?
srv=
[ ! -e "$sock" ] && ok "  its socket is removed" || bad "  $sock still there"
[ ! -e "$pidf" ] && ok "  its pid file is removed" || bad "  $pidf still there"
out=$(show); expect_rc "urxe cm show with no service" 1 $?
check "  says none runs" "no CM service running" "$out"

# In the background: the command returns once the socket listens, the service logs to NETNS.log and
# leaves by itself after --idle-exit 1 (the connection of `show` counts as activity).
t0=$(date +%s.%N)
out=$("$U" cm --idle-exit 1 2>&1); expect_rc "urxe cm --idle-exit 1 (detaches)" 0 $?
out=$(show); expect_rc "  answers right after the command returned" 0 $?
bg=$(cat "$pidf" 2>/dev/null)
check "  from a process of its own, in the pid file" "^[0-9]+\$" "$bg"
i=0
while [ $i -lt 100 ] && [ -e "$sock" ]; do sleep 0.05; i=$((i + 1)); done
[ ! -e "$sock" ] && [ ! -e "$pidf" ] && ok "  exits by itself when idle, its files removed" ||
  bad "  still there 5 s later"
i=0
while [ $i -lt 40 ] && [ -n "$bg" ] && kill -0 "$bg" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
[ -n "$bg" ] && ! kill -0 "$bg" 2>/dev/null && ok "  the process is gone" || bad "  process $bg still runs"
check "  took at least its idle second" "^1\$" \
  "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print (b - a >= 1) }')"
check "  and logged to $ns.log" "listening .*idle for 1 s: exiting" "$(tr '\n' ' ' <"$dir/$ns.log")"

# --- the loop around a scripted core
"$E" 2>"$URXE_RUN_DIR/echo.log" &
srv=$!
i=0
while [ $i -lt 100 ] && [ ! -S "$sock" ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ] && ok "cm_echo_daemon listens" || bad "cm_echo_daemon: no socket"
/usr/bin/python3 "$here/cm_client.py" "$sock" "$U" --events || fail=1
cap=$URXE_RUN_DIR/echo.pcap
/usr/bin/python3 - "$mac" "$cap" <<'EOF' || bad "MAD echo through the port"
import struct, sys, threading, time
from scapy.all import AsyncSniffer, Ether, IP, UDP, Raw, sendp, wrpcap
from scapy.contrib.roce import BTH
mac, cap = sys.argv[1], sys.argv[2]
mad = struct.pack(">BBBBHHQHHI", 1, 7, 2, 3, 0, 0, 0x77, 0x0013, 0, 0) + bytes(232)  # a REP
started, answered = threading.Event(), threading.Event()
sn = AsyncSniffer(iface="vb", lfilter=lambda p: p.haslayer(Ether) and p[Ether].src == mac,
                  started_callback=started.set, prn=lambda p: answered.set())
sn.start()
if not started.wait(10):
    sys.exit("the sniffer on vb did not start within 10 s")
sendp(Ether(dst=mac) / IP(src="10.93.0.2", dst="10.93.0.1", flags="DF", tos=0x68) /
      UDP(sport=0xd872, dport=4791, chksum=0) / BTH(opcode=0x64, dqpn=1, psn=3) /
      Raw(struct.pack(">II", 0x80010000, 1) + mad), iface="vb", verbose=False)
sent = time.monotonic()
answered.wait(10)
# Still listening until a second after the send: a second answer (one too many) would come within it.
time.sleep(max(0.0, sent + 1 - time.monotonic()))
got = sn.stop()
wrpcap(cap, got)
print("captured %d frame(s) from va" % len(got))
sys.exit(0 if len(got) == 1 else 1)
EOF
b=$(tshark -r "$cap" -T fields -E separator=' ' -e udp.srcport -e ip.dsfield -e infiniband.bth.opcode \
  -e infiniband.bth.destqp -e infiniband.deth.q_key -e infiniband.deth.srcqp -e ip.src -e ip.dst 2>/dev/null)
check "the answer on the wire: UDP source 55410, TOS 0x68, UD SEND_ONLY to QP1, GSI Q_Key, from QP1" \
  "^55410 0x68 100 0x0*1 0x0*80010000 0x0*1 10\.93\.0\.1 10\.93\.0\.2\$" "$b"
out=$("$U" pcap decode --strict "$cap" 2>&1); expect_rc "  its ICRC is good (urxe pcap decode --strict)" 0 $?
check "  the scripted core counted the REP received and sent" "^  REP +1 +1\$" "$(show)"
# urxe0 to itself: sent on va to va's MAC, answered through the LoopbackSender, received once more.
/usr/bin/python3 - "$mac" <<'EOF' || bad "MAD to itself"
import struct, sys
from scapy.all import Ether, IP, UDP, Raw, sendp
from scapy.contrib.roce import BTH
mad = struct.pack(">BBBBHHQHHI", 1, 7, 2, 3, 0, 0, 0x78, 0x0014, 0, 0) + bytes(232)  # an RTU
sendp(Ether(src=sys.argv[1], dst=sys.argv[1]) / IP(src="10.93.0.1", dst="10.93.0.1", flags="DF") /
      UDP(sport=0xd872, dport=4791, chksum=0) / BTH(opcode=0x64, dqpn=1, psn=4) /
      Raw(struct.pack(">II", 0x80010000, 1) + mad), iface="va", verbose=False)
EOF
i=0
while [ $i -lt 30 ] && ! show | grep -qE "^  RTU +1 +2\$"; do sleep 0.1; i=$((i + 1)); done
check "a MAD to itself: answered and the answer received (RTU sent 1, received 2)" "^  RTU +1 +2\$" "$(show)"
check "  both answers sent through the port (tx_frames 2)" "^  tx_frames +2\$" "$(show)"
check "  none dropped (tx_dropped 0)" "^  tx_dropped +0\$" "$(show)"
kill -TERM "$srv"
wait "$srv"
expect_rc "cm_echo_daemon exits on SIGTERM" 0 $?
srv=

[ $fail = 0 ] && echo "cm_service_test: all checks passed"
exit $fail
