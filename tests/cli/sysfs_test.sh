#!/bin/sh
# `urxe run` shows the urxe devices at the real /sys/class/infiniband (private mount namespace), with the port
# files a kernel RoCE port has: state follows the interface, counters/port_* follow the traffic
# (ibv_rc_pingpong), ibstatus and ibstat read them; every other /sys/class path still works inside, nothing shows
# outside, and URXE_NO_SYSFS_MOUNT=1 or a missing CAP_SYS_ADMIN leave /sys as it is.
#   usage: sysfs_test.sh URXE PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
for t in ibv_rc_pingpong ibstatus ibstat ethtool jq setpriv; do
  command -v $t >/dev/null || { echo "SKIP: $t missing (tools/apt-packages.txt)"; exit 77; }
done
netns_private -t 150 "$0" "$@"
U=$1
export URXE_PROVIDER=$2
unset LD_PRELOAD SYSFS_PATH URXE_LOG URXE_DEBUG URXE_NO_SYSFS_MOUNT
. "$(dirname "$0")/../lib/check.sh"

netns_private_veth tmp urxe-cli-sysfs 10.71.0.1/24 10.71.0.2/24 || exit 1
# This network namespace's /sys (as `ip netns exec` mounts it): /sys/class/net then lists va and vb.
mount -t sysfs urxe-test /sys || exit 1
netns_wait_up va
export URXE_RUN_DIR="$tmp/run"
out=$("$U" link add urxe0 netdev va 2>&1); expect_rc "link add urxe0 netdev va" 0 $?
port=/sys/class/infiniband/urxe0/ports/1

# --- the device at /sys/class/infiniband, as the kernel shows a RoCE port
out=$("$U" run -- cat $port/state 2>&1); expect_rc "urxe run -- cat $port/state" 0 $?
check "  4: ACTIVE" "^4: ACTIVE$" "$out"
out=$("$U" run -- cat $port/phys_state $port/link_layer $port/rate $port/lid $port/cap_mask 2>&1)
check "  phys_state 5: LinkUp" "^5: LinkUp$" "$out"
check "  link_layer Ethernet" "^Ethernet$" "$out"
check "  rate of a veth (10000 Mb/s): 10 Gb/sec (1X FDR10)" "^10 Gb/sec \(1X FDR10\)$" "$out"
check "  lid 0x0, cap_mask rxe's" "^0x0$" "$out"
check "  cap_mask 0x00010000" "^0x00010000$" "$out"
out=$("$U" run -- ls /sys/class/infiniband/urxe0/device/net 2>&1)
check "  device/net lists the interface" "^va$" "$out"
out=$("$U" run -- cat /sys/class/infiniband/urxe0/device/net/va/ifindex 2>&1)
check "  and leads to its sysfs directory" "^$(cat /sys/class/net/va/ifindex)$" "$out"
out=$("$U" run -- cat /sys/class/misc/rdma_cm/abi_version 2>&1)
check "  /sys/class/misc/rdma_cm/abi_version 4" "^4$" "$out"
# No /dev/infiniband/rdma_cm node (/dev/null's numbers would answer librdmacm's commands with garbage when the
# provider is not preloaded); under `urxe run` the provider's UCMA shim serves the path, starting this
# namespace's CM service, which is stopped again by its pid file.
[ -e /dev/infiniband/rdma_cm ] && bad "  /dev/infiniband/rdma_cm made" || ok "  no /dev/infiniband/rdma_cm"
out=$("$U" run -- /usr/bin/python3 -c '
from pyverbs.cmid import CMEventChannel
try:
    CMEventChannel()
    print("opened")
except Exception as e:
    print("refused:", e)' 2>&1)
check "  librdmacm opens an event channel through the shim (pyverbs)" "^opened$" "$out"
for f in "$URXE_RUN_DIR"/cm/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
out=$("$U" run -- ibstatus 2>&1); expect_rc "urxe run -- ibstatus" 0 $?
check "  shows urxe0" "Infiniband device 'urxe0' port 1 status" "$out"
check "  ACTIVE" "state:[[:space:]]+4: ACTIVE" "$out"
check "  on Ethernet" "link_layer:[[:space:]]+Ethernet" "$out"
check "  with its default GID" "default gid:[[:space:]]+fe80:" "$out"
out=$("$U" run -- ibstat urxe0 2>&1); expect_rc "urxe run -- ibstat urxe0 (libibumad)" 0 $?
check "  State: Active" "State: Active" "$out"
check "  Rate: 10 (FDR10)" "Rate: 10 \(FDR10\)" "$out"
check "  Capability mask: 0x00010000" "Capability mask: 0x00010000" "$out"
check "  Link layer: Ethernet" "Link layer: Ethernet" "$out"

# --- every other class still works inside: the same entries, and the interfaces for ip, ethtool, libibverbs
before=$(ls /sys/class)
after=$("$U" run -- ls /sys/class 2>&1)
missing=$(printf '%s\n' "$before" | while read -r c; do printf '%s\n' "$after" | grep -qx "$c" || echo "$c"; done)
[ -z "$missing" ] && ok "every class of /sys/class is still there inside" || bad "classes missing inside: $missing"
check "  plus infiniband and infiniband_verbs" "^infiniband_verbs$" "$after"
out=$("$U" run -- sh -c 'cat /sys/class/net/va/operstate /sys/class/net/va/address; ls /sys/class/net' 2>&1)
check "  /sys/class/net/va/operstate up" "^up$" "$out"
check "  /sys/class/net/va/address" "^$(cat /sys/class/net/va/address)$" "$out"
check "  /sys/class/net lists lo" "^lo$" "$out"
out=$("$U" run -- ethtool va 2>&1); check "  ethtool va" "Speed: 10000Mb/s" "$out"
out=$("$U" run -- ip -br link show va 2>&1); check "  ip link show va" "^va@vb +UP" "$out"
out=$("$U" run -- ibv_devinfo -d urxe0 2>&1); check "  ibv_devinfo -d urxe0" "PORT_ACTIVE" "$out"
out=$("$U" run -- sh -c 'touch /sys/class/x 2>&1; echo rc=$?' 2>&1)
check "  the tmpfs over /sys/class is read-only" "rc=1" "$out"
[ -e /sys/class/infiniband ] && bad "/sys/class/infiniband shows outside urxe run" || ok "nothing shows outside urxe run"
[ -z "$(findmnt -rn /sys/class)" ] && ok "  no mount on /sys/class outside" || bad "  a mount on /sys/class outside"

# --- opting out, and without CAP_SYS_ADMIN: the real /sys, silently unless URXE_LOG=info
out=$(URXE_NO_SYSFS_MOUNT=1 "$U" run -- sh -c 'ls /sys/class/infiniband 2>/dev/null; echo rc=$?' 2>&1)
check "URXE_NO_SYSFS_MOUNT=1: no /sys/class/infiniband" "rc=2" "$out"
nocap() { setpriv --bounding-set -sys_admin --inh-caps -sys_admin "$@"; }
out=$(nocap "$U" run -- sh -c 'ls /sys/class/infiniband 2>/dev/null; echo rc=$?' 2>&1)
check "without CAP_SYS_ADMIN: no /sys/class/infiniband" "rc=2" "$out"
check_not "  and no note" "note: urxe devices not shown" "$out"
out=$(URXE_LOG=info nocap "$U" run -- true 2>&1); expect_rc "  the command still runs" 0 $?
check "  URXE_LOG=info says why" "note: urxe devices not shown at /sys/class/infiniband: .*Operation not permitted" "$out"

# --- the state follows the interface whenever the tree is refreshed (here by urxe stats)
ip link set vb down
"$U" stats urxe0 >/dev/null 2>&1
out=$("$U" run -- cat $port/state $port/phys_state 2>&1)
check "peer down (va without carrier), after urxe stats: 1: DOWN" "^1: DOWN$" "$out"
check "  3: Disabled" "^3: Disabled$" "$out"
ip link set vb up
netns_wait_up va
"$U" stats urxe0 >/dev/null 2>&1
out=$("$U" run -- cat $port/state 2>&1); check "  up again: 4: ACTIVE" "^4: ACTIVE$" "$out"

# --- counters/port_* after traffic: both sides of ibv_rc_pingpong on urxe0 (1000 x 4096 bytes each way)
timeout 60 "$U" run -- ibv_rc_pingpong -d urxe0 -g 1 >"$tmp/server" 2>&1 &
srv=$!
netns_wait_listen $srv
timeout 60 "$U" run -- ibv_rc_pingpong -d urxe0 -g 1 10.71.0.1 >"$tmp/client" 2>&1
expect_rc "ibv_rc_pingpong client" 0 $?
wait $srv; expect_rc "ibv_rc_pingpong server" 0 $?
json=$("$U" stats urxe0 --json)
sent_bytes=$(printf '%s' "$json" | jq '.counters.sent_bytes')
sent_pkts=$(printf '%s' "$json" | jq '.counters.sent_pkts')
rcvd_pkts=$(printf '%s' "$json" | jq '.counters.rcvd_pkts')
c=/sys/class/infiniband/urxe0/ports/1/counters
out=$("$U" run -- sh -c "cat $c/port_xmit_packets $c/port_xmit_data $c/port_rcv_packets $c/port_rcv_data" 2>&1)
set -- $out
xp=${1:-0} xd=${2:-0} rp=${3:-0} rd=${4:-0}
[ "$xp" -gt 0 ] && [ "$xp" = "$sent_pkts" ] && ok "port_xmit_packets $xp > 0, = sent_pkts" ||
  bad "port_xmit_packets $xp, sent_pkts $sent_pkts"
[ "$rp" = "$rcvd_pkts" ] && ok "port_rcv_packets $rp = rcvd_pkts" || bad "port_rcv_packets $rp, rcvd_pkts $rcvd_pkts"
[ "$xd" = $((sent_bytes / 4)) ] && ok "port_xmit_data $xd = sent_bytes $sent_bytes / 4" ||
  bad "port_xmit_data $xd, sent_bytes $sent_bytes"
# What was sent: 2 x 1000 messages of 4096 bytes, plus per frame at most Ethernet 14 + IPv4 20 + UDP 8 +
# BTH 12 + AETH/RETH 16 + ICRC 4 bytes.
payload=$((2 * 1000 * 4096))
[ $((xd * 4)) -ge $payload ] && [ $((xd * 4)) -le $((payload + xp * 74 + 3)) ] &&
  ok "port_xmit_data * 4 = $((xd * 4)) bytes: the payload $payload plus <= 74 bytes of headers per frame" ||
  bad "port_xmit_data * 4 = $((xd * 4)) bytes for $payload payload bytes in $xp frames"
# One device both ways: what it sent, it received (each frame reached a QP; no loss on a veth).
[ "$rd" = "$xd" ] && ok "port_rcv_data = port_xmit_data on one device" || bad "port_rcv_data $rd, port_xmit_data $xd"
exit $fail
