#!/bin/sh
# Devices follow network namespaces, as the kernel's exclusive rdma netns mode does: with one run directory
# and devices in two namespaces A and B (joined by a veth, va in A, vb in B), `urxe run -- ibv_devices` in
# each lists only its own device and nothing warns; an application that takes the first device opens its
# own. A device whose interface has gone (its namespace deleted, or the veth with it) is removed by
# `urxe link show` / `urxe link add`, and its name can be used again.
#   usage: cli_netns_test.sh URXE
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v ibv_devices >/dev/null || { echo "SKIP: ibv_devices missing (apt-get install ibverbs-utils)"; exit 77; }
netns_private -m -t 100 "$0" "$@"
U=$1
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH IBV_SHOW_WARNINGS
. "$(dirname "$0")/../lib/check.sh"

a=urxeNA$$; b=urxeNB$$
netns_devfs || exit 1
netns_tmpdir URXE_RUN_DIR urxe-cli-netns || exit 1
export URXE_RUN_DIR
netns_pair $a $b va vb 10.69.0.1/24 10.69.0.2/24 || exit 1
netns_veth -n $a vc vd || exit 1
in_a() { ip netns exec $a "$@"; }
in_b() { ip netns exec $b "$@"; }

out=$(in_a "$U" link add urxe0 netdev va --port loop 2>&1); expect_rc "link add urxe0 netdev va in A" 0 $?
out=$(in_b "$U" link add urxe1 netdev vb --port loop 2>&1); expect_rc "link add urxe1 netdev vb in B" 0 $?

# --- each namespace sees its own device only, with no warning from urxe or libibverbs
out=$(in_a timeout 30 "$U" run -- ibv_devices 2>&1); expect_rc "A: urxe run -- ibv_devices" 0 $?
check "  lists urxe0" "urxe0" "$out"
check_not "  and not B's urxe1" "urxe1" "$out"
check_not "  with no warning" "[Ww]arning" "$out"
out=$(in_b timeout 30 "$U" run -- ibv_devices 2>&1); expect_rc "B: urxe run -- ibv_devices" 0 $?
check "  lists urxe1" "urxe1" "$out"
check_not "  and not A's urxe0" "urxe0" "$out"
check_not "  with no warning" "[Ww]arning" "$out"
out=$(in_b sh -c 'eval "$("$1" env 2>&1 >/dev/null)"' sh "$U" 2>&1)
check_not "B: urxe env warns about nothing" "[Ww]arning" "$out"
# An application that takes the first device (ibv_devinfo without -d) opens its namespace's.
out=$(in_b timeout 30 "$U" run -- ibv_devinfo 2>&1); expect_rc "B: urxe run -- ibv_devinfo (first device)" 0 $?
check "  is urxe1" "hca_id:[[:space:]]+urxe1" "$out"
check_not "  and only urxe1" "urxe0" "$out"
# /sys/class/infiniband under urxe run (a private mount namespace inside ip netns exec's): only the
# namespace's own device, ACTIVE, and the namespace's own /sys/class/net.
out=$(in_a "$U" run -- sh -c 'ls /sys/class/infiniband; cat /sys/class/infiniband/*/ports/1/state' 2>&1)
check "A: urxe run shows urxe0 at /sys/class/infiniband" "^urxe0$" "$out"
check "  ACTIVE" "^4: ACTIVE$" "$out"
check_not "  and not B's urxe1" "urxe1" "$out"
out=$(in_a "$U" run -- ls /sys/class/net 2>&1)
check "  /sys/class/net is A's (va)" "^va$" "$out"
check_not "  not B's (vb)" "^vb$" "$out"
# The run directory's owner still sees every device, the other namespace's marked as such.
out=$(in_a "$U" link show 2>&1); expect_rc "A: link show" 0 $?
check "  lists urxe0 as here" "^link urxe0/1 state ACTIVE .*netdev va port loop local-path off dev uverbs0$" "$out"
check "  and urxe1 as another namespace's, with its state there" \
  "^link urxe1/1 state ACTIVE .*netdev vb port loop local-path off dev uverbs1 netns [0-9]+:[0-9]+ \(another network namespace\)$" "$out"
out=$(in_a "$U" link add urxe1 netdev vc --port loop 2>&1); expect_rc "A: urxe1's name is still taken" 1 $?
check "  saying where it is" "device 'urxe1' already exists \(on vb" "$out"

# --- B deleted: urxe1's interface is gone with it, and urxe0's too (a veth dies with its peer)
ip netns del $b
i=0
while [ $i -lt 100 ] && in_a ip link show va >/dev/null 2>&1; do sleep 0.05; i=$((i + 1)); done
out=$(in_a "$U" link show 2>&1); expect_rc "A: link show after ip netns del B" 0 $?
check_not "  urxe1 (its namespace deleted) is gone" "urxe1" "$out"
check_not "  urxe0 (its veth went with B) is gone" "urxe0" "$out"
[ -e /dev/infiniband/uverbs1 ] && bad "  /dev/infiniband/uverbs1 still there" || ok "  and so are their /dev nodes"
out=$(in_a "$U" link add urxe1 netdev vc --port loop 2>&1); expect_rc "A: link add urxe1 netdev vc (the name reused)" 0 $?
check "  on uverbs0 again" "^urxe1: uverbs0 on vc" "$out"

# --- a veth removed in the namespace itself: link add drops the device before it checks the name
out=$(in_a "$U" link add urxe2 netdev vd --port loop 2>&1); expect_rc "A: link add urxe2 netdev vd" 0 $?
in_a ip link del vc
out=$(in_a "$U" link add urxe1 netdev lo --port loop 2>&1); expect_rc "A: after ip link del vc, link add urxe1 again" 0 $?
out=$(in_a "$U" link show 2>&1)
check "  urxe1 is the new one, on lo" "^link urxe1/1 .*netdev lo " "$out"
check_not "  urxe2 (on vd, the peer of vc) is gone too" "urxe2" "$out"

exit $fail
