#!/bin/sh
# mckey (rdmacm-utils) over urxe: RDMA CM multicast joins through the CM service, UD multicast through the
# ports. Two namespaces joined by a veth: in A a receiver and then the sender, on one device; in B two
# receivers, two processes on one device (what one sends to the group reaches the other process through
# the host, and the wire). Every receiver must get all 10 messages; while they are joined, B's interface
# holds the group at IP level (IGMP, the CM service's join) and its MAC; after they left, neither.
#   usage: mckey_2ns.sh URXE PROVIDER_SO [SENDER OPTIONS]   (e.g. -o: a send-only sender)
set -u
. "$(dirname "$0")/../lib/netns.sh"
. "$(dirname "$0")/../lib/check.sh"
netns_require_root
urxe=$1 so=$2
shift 2
mkdir -p /dev/infiniband
a=mcA$$ b=mcB$$ group=239.1.2.3
netns_tmpdir tmp urxe-mckey || exit 1
netns_pair $a $b va vb 10.89.0.1/24 10.89.0.2/24 || exit 1
mkdir -p "$tmp/run_a" "$tmp/run_b"
fail=0

receiving() { grep -q "receiving data transfers" "$1" || ! kill -0 "$2" 2>/dev/null; }
receiver() {  # receiver NS IF RUN OUT ADDR: starts one, waits until it has joined
  netns_urxe_side_in "$3" "$1" "$2" "$4" "$urxe" "$so" "" stdbuf -oL mckey -m $group -b "$5" &
  pid=$!
  netns_wait_for 20 receiving "$4" $pid || bad "$4: no join within 20 s"
}
receiver $a va "$tmp/run_a" "$tmp/ra" 10.89.0.1
ra=$pid
receiver $b vb "$tmp/run_b" "$tmp/rb1" 10.89.0.2
rb1=$pid
receiver $b vb "$tmp/run_b" "$tmp/rb2" 10.89.0.2
rb2=$pid
check "B's interface is in the group at IP level (the CM service's IGMP join)" "$group" \
  "$(ip -n $b maddr show dev vb)"
check "B's interface passes the group's MAC" "01:00:5e:01:02:03" "$(ip -n $b maddr show dev vb)"
check "B's CM service shows both receivers' joins (urxe cm show)" "^2$" \
  "$(ip netns exec $b env URXE_RUN_DIR="$tmp/run_b" "$urxe" cm show 2>&1 | grep -c "mcast $group")"

netns_urxe_side_in "$tmp/run_a" $a va "$tmp/sender" "$urxe" "$so" "" mckey -m $group -b 10.89.0.1 -s "$@"
expect_rc "sender ($*)" 0 $?
check "sender sent" "data transfers complete" "$(cat "$tmp/sender")"
for r in ra:$ra rb1:$rb1 rb2:$rb2; do
  wait "${r#*:}"
  rc=$?
  expect_rc "receiver ${r%:*}" 0 $rc
  check "receiver ${r%:*} got its 10 messages" "test complete" "$(cat "$tmp/${r%:*}")"
  [ $rc -eq 0 ] || sed 's/^/  /' "$tmp/${r%:*}"
done
check_not "B's interface left the group once its receivers left" "$group" "$(ip -n $b maddr show dev vb)"
[ $fail -eq 0 ] && echo "mckey_2ns: OK" || echo "mckey_2ns: FAILED"
exit $fail
