#!/bin/sh
# Inside in_netns.sh: unmodified ibverbs-utils list and describe urxe0 from the fake tree, and see GID
# changes once `link refresh` rewrote the table. GID slots follow the kernel's rules: an address keeps its
# index while it exists, a removed one leaves a hole, a new one fills the lowest hole.
set -u
fail=0
check() {  # check DESCRIPTION PATTERN TEXT
  if printf '%s\n' "$3" | grep -qE -- "$2"; then :; else echo "FAIL: $1 (no /$2/)"; fail=1; fi
}
mac=$(cat /sys/class/net/va/address 2>/dev/null || ip -o link show va | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
# EUI-64 node GUID from the MAC (U/L bit flipped, ff:fe inserted)
set -- $(echo "$mac" | tr ':' ' ')
b0=$(printf '%02x' $((0x$1 ^ 2)))
guid="$b0$2$3fffe$4$5$6"

out=$(ibv_devices 2>&1); echo "$out"
check "ibv_devices lists urxe0 with its GUID" "urxe0[[:space:]]+$guid" "$out"

out=$(ibv_devinfo -v -d urxe0 2>&1); echo "$out"
check "hca_id" "hca_id:[[:space:]]+urxe0" "$out"
check "transport" "transport:[[:space:]]+InfiniBand \(0\)" "$out"
check "node_guid" "node_guid:[[:space:]]+$(echo "$guid" | sed 's/\(....\)\(....\)\(....\)\(....\)/\1:\2:\3:\4/')" "$out"
check "port state" "state:[[:space:]]+PORT_ACTIVE \(4\)" "$out"
check "link layer" "link_layer:[[:space:]]+Ethernet" "$out"
check "active_mtu for a 1500-byte link" "active_mtu:[[:space:]]+1024 \(3\)" "$out"
check "max_mtu" "max_mtu:[[:space:]]+4096 \(5\)" "$out"
check "phys_state" "phys_state:[[:space:]]+LINK_UP \(5\)" "$out"
check "gid_tbl_len" "gid_tbl_len:[[:space:]]+16" "$out"
check "GID 0 = default link-local" "GID\[  0\]:[[:space:]]+fe80::.*, RoCE v2" "$out"
check "GID 1 = va's IPv4" "GID\[  1\]:[[:space:]]+::ffff:10\.77\.0\.1, RoCE v2" "$out"
if printf '%s\n' "$out" | grep -q "GID\[  2\]"; then echo "FAIL: unexpected GID 2"; fail=1; fi

# An address added to va appears once the table is refreshed; one removed disappears.
ip addr add 10.77.1.5/24 dev va
"$URXE_DEVCTL" link refresh urxe0
out=$(ibv_devinfo -v -d urxe0 2>&1)
check "new address as GID 2" "GID\[  2\]:[[:space:]]+::ffff:10\.77\.1\.5, RoCE v2" "$out"
ip addr del 10.77.0.1/24 dev va
"$URXE_DEVCTL" link refresh urxe0
out=$(ibv_devinfo -v -d urxe0 2>&1)
check "after removal the remaining address keeps GID 2" "GID\[  2\]:[[:space:]]+::ffff:10\.77\.1\.5, RoCE v2" "$out"
if printf '%s\n' "$out" | grep -q "GID\[  1\]"; then echo "FAIL: GID 1 not left empty"; fail=1; fi
if printf '%s\n' "$out" | grep -q "10\.77\.0\.1"; then echo "FAIL: removed address still listed"; fail=1; fi
# The device kept its identity across refreshes (same device, still opens).
check "still listed" "hca_id:[[:space:]]+urxe0" "$out"

# `link watch` follows address changes by itself. It refreshes once when it starts, after it subscribed to
# rtnetlink: an address added before (10.77.3.3, into the hole at GID 1) appearing says it listens; that
# address removed and another one added after that can only reach it as events.
ip addr add 10.77.3.3/24 dev va
"$URXE_DEVCTL" link watch 2>/dev/null &
watcher=$!
n=0
until ibv_devinfo -v -d urxe0 2>&1 | grep -q "::ffff:10.77.3.3, RoCE v2" || [ $n -ge 100 ]; do sleep 0.05; n=$((n + 1)); done
[ $n -lt 100 ] || { echo "FAIL: link watch did not refresh the table when it started (within 5 s)"; fail=1; }
ip addr del 10.77.3.3/24 dev va
ip addr add 10.77.2.7/24 dev va
n=0
until ibv_devinfo -v -d urxe0 2>&1 | grep -q "::ffff:10.77.2.7, RoCE v2" || [ $n -ge 100 ]; do sleep 0.05; n=$((n + 1)); done
out=$(ibv_devinfo -v -d urxe0 2>&1)
check "link watch put a new address into the hole at GID 1" "GID\[  1\]:[[:space:]]+::ffff:10\.77\.2\.7, RoCE v2" "$out"
if printf '%s\n' "$out" | grep -q "10\.77\.3\.3"; then echo "FAIL: link watch left a removed address listed"; fail=1; fi
check "and left GID 2 alone" "GID\[  2\]:[[:space:]]+::ffff:10\.77\.1\.5, RoCE v2" "$out"
kill $watcher 2>/dev/null; wait $watcher 2>/dev/null

out=$("$URXE_DEVCTL" link show); echo "$out"
check "link show" "link urxe0/1 state ACTIVE physical_state LINK_UP netdev va" "$out"
[ $fail = 0 ] && echo "ibv_utils: all checks passed"
exit $fail
