#!/bin/sh
# `urxe link add/show/del`, `urxe env` and `urxe run -- ibv_devinfo` as a user types them, in a private
# mount + network namespace (tmpfs on /dev/infiniband, veth va 10.66.0.1 <-> vb), plus the errors users
# hit (missing interface, duplicate name, bad MTU, no such device) and the nftables ingress drop that
# `link add` installs with CAP_NET_ADMIN and `link del` removes. The provider must have been built next to
# URXE (build tree: <build>/provider/liburxe-rdmav34.so), which `urxe env` must find by itself.
#   usage: cli_link_test.sh URXE
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v ibv_devinfo >/dev/null || { echo "SKIP: ibv_devinfo missing (apt-get install ibverbs-utils)"; exit 77; }
netns_private -t 100 "$0" "$@"
U=$1
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH
. "$(dirname "$0")/../lib/check.sh"
has_nft=0; command -v nft >/dev/null && has_nft=1

netns_private_veth URXE_RUN_DIR urxe-cli-test 10.66.0.1/24 || exit 1
export URXE_RUN_DIR

# --- help and usage
for c in "" "link" "link add" "link del" "link show" "env" "run"; do
  # shellcheck disable=SC2086
  out=$("$U" $c --help 2>&1); rc=$?
  expect_rc "urxe $c --help" 0 $rc
  check "urxe $c --help says usage" "^usage: urxe" "$out"
done
out=$("$U" link add urxe0 netdev 2>&1); expect_rc "link add without IFACE is a usage error" 2 $?
check "  and says what is expected" "expected NAME netdev IFACE" "$out"

# --- link add errors
out=$("$U" link add urxe0 netdev nosuch0 2>&1); expect_rc "link add on a missing interface fails" 1 $?
check "  naming the interface and how to list them" "no interface 'nosuch0'.*ip link" "$out"
out=$("$U" link add urxe0 netdev va --mtu 9000 2>&1); expect_rc "--mtu above the interface's MTU fails" 1 $?
check "  with the fix" "ip link set va mtu 9000" "$out"
out=$("$U" link add urxe0 netdev va --mtu 12x 2>&1); expect_rc "--mtu not a number" 2 $?
out=$("$U" link add rxe0 netdev va 2>&1); expect_rc "a name starting with rxe is refused" 1 $?
check "  saying why" "bad device name 'rxe0'" "$out"
out=$("$U" link show 2>&1); [ -z "$out" ] && ok "failed adds left no device" || bad "failed adds left: $out"

# --- link add / show
out=$("$U" link add urxe0 netdev va 2>&1); rc=$?
expect_rc "link add urxe0 netdev va" 0 $rc
check "  reports the uverbs node" "^urxe0: uverbs0 on va" "$out"
[ -c /dev/infiniband/uverbs0 ] || [ -L /dev/infiniband/uverbs0 ] && ok "/dev/infiniband/uverbs0 exists" || bad "/dev/infiniband/uverbs0 missing"
if [ $has_nft = 1 ]; then
  rules=$(nft list table netdev urxe_va 2>&1)
  check "nftables ingress drop of UDP/4791 on va" "hook ingress device \"?va\"?.*" "$rules"
  check "  drops udp dport 4791, counting" "udp dport 4791 counter packets [0-9]+ bytes [0-9]+ drop" "$rules"
fi
out=$("$U" link add urxe0 netdev va 2>&1); expect_rc "adding urxe0 twice fails" 1 $?
check "  saying how to fix it" "already exists.*urxe link del urxe0" "$out"
out=$("$U" link add urxe1 netdev vb --port loop 2>&1); expect_rc "a second device (vb, loop port)" 0 $?
out=$("$U" link show 2>&1); rc=$?
expect_rc "link show" 0 $rc
check "link show: urxe0 like rdma link show" "^link urxe0/1 state ACTIVE physical_state LINK_UP netdev va" "$out"
check "link show: urxe0 with the same-host path" "^link urxe0/1 .* local-path on gso on dev uverbs0" "$out"
if tc qdisc add dev va clsact 2>/dev/null; then
  out=$("$U" link show urxe0 2>&1)
  check "  off while va has an ingress qdisc" "^link urxe0/1 .* local-path off \(ingress qdisc clsact\) gso on dev uverbs0" "$out"
  tc qdisc del dev va clsact
  out=$("$U" link show 2>&1)
fi
# (ethtool is one of tools/apt-packages.txt: not being able to turn the offload off is a failure, not a skip)
if ethtool -K va tx-udp-segmentation off 2>/dev/null; then
  out2=$("$U" link show urxe0 2>&1)
  check "  gso cut by the kernel while va has no UDP segmentation offload" \
    "^link urxe0/1 .* gso on \(cut by the kernel\) dev uverbs0" "$out2"
  ethtool -K va tx-udp-segmentation on
else
  bad "  ethtool -K va tx-udp-segmentation off failed"
fi
check "link show: urxe0's IPv4 GID" "gid 10\.66\.0\.1" "$out"
check "link show: urxe1 on vb" "^link urxe1/1 state ACTIVE .*netdev vb port loop local-path off dev uverbs1" "$out"
"$U" link del urxe1 >/dev/null 2>&1
out=$("$U" link add urxe1 netdev vb --no-local-path --no-gso 2>&1)
expect_rc "link add urxe1 --no-local-path --no-gso" 0 $?
out=$("$U" link show urxe1 2>&1)
check "  link show: local-path off, gso off" \
  "^link urxe1/1 state ACTIVE .*netdev vb port auto local-path off gso off dev uverbs1" "$out"
conf=$(cat "$URXE_RUN_DIR/sys/class/infiniband/urxe1/urxe.conf")
check "  kept in urxe.conf" "^local_path=0$" "$conf"
check "  kept in urxe.conf" "^gso=0$" "$conf"
"$U" link del urxe1 >/dev/null 2>&1
out=$("$U" link add urxe1 netdev vb --port loop 2>&1); expect_rc "urxe1 again (loop port)" 0 $?
out=$("$U" link 2>&1); check "bare 'urxe link' shows too" "^link urxe0/1" "$out"

# --- env / run
out=$("$U" env 2>&1); expect_rc "urxe env" 0 $?
check "env: SYSFS_PATH in the run dir" "^export SYSFS_PATH='$URXE_RUN_DIR/sys'$" "$out"
lib=$(printf '%s\n' "$out" | sed -n "s/^export LD_PRELOAD='\(.*\)'$/\1/p")
case "$lib" in
  /*liburxe-rdmav34.so) [ -r "$lib" ] && ok "env: LD_PRELOAD names an existing provider ($lib)" || bad "env: $lib does not exist" ;;
  *) bad "env: no LD_PRELOAD of liburxe-rdmav34.so: $out" ;;
esac
want="$(cd "$(dirname "$U")/../provider" 2>/dev/null && pwd)/liburxe-rdmav34.so"
[ "$lib" = "$want" ] && ok "env: the provider next to urxe" || bad "env: $lib, want $want"
out=$(LD_PRELOAD=/lib/x86_64-linux-gnu/libc.so.6 "$U" env 2>&1)
check "env keeps an existing LD_PRELOAD" "^export LD_PRELOAD='/lib/x86_64-linux-gnu/libc.so.6:$lib'$" "$out"
out=$("$U" env --driver 2>&1)
check "env --driver: the .driver line" "^driver /.*/liburxe$" "$out"
out=$(URXE_PROVIDER=/nonexistent/liburxe-rdmav34.so "$U" env 2>&1); expect_rc "env with a missing provider fails" 1 $?
check "  naming the file" "/nonexistent/liburxe-rdmav34.so is missing" "$out"

out=$(timeout 30 "$U" run -- ibv_devinfo -v -d urxe0 2>&1); rc=$?
expect_rc "urxe run -- ibv_devinfo -v -d urxe0" 0 $rc
check "ibv_devinfo: hca_id urxe0" "hca_id:[[:space:]]+urxe0" "$out"
check "ibv_devinfo: port active" "state:[[:space:]]+PORT_ACTIVE \(4\)" "$out"
check "ibv_devinfo: va's IPv4 GID" "GID\[  1\]:[[:space:]]+::ffff:10\.66\.0\.1, RoCE v2" "$out"
out=$(eval "$("$U" env)"; timeout 30 ibv_devices 2>&1)
check "eval \"\$(urxe env)\"; ibv_devices lists both" "urxe0.*" "$out"
check "  and urxe1" "urxe1" "$out"
out=$("$U" run -- sh -c 'echo "$SYSFS_PATH|$LD_PRELOAD"; exit 7' 2>&1); rc=$?
expect_rc "run passes CMD's exit status" 7 $rc
check "run sets the environment" "^$URXE_RUN_DIR/sys\|$lib$" "$out"
out=$("$U" run -- /nonexistent-cmd 2>&1); expect_rc "run of a missing command" 127 $?
check "  names it" "cannot run /nonexistent-cmd" "$out"

# Docker's default capability set: NET_RAW but no NET_ADMIN. The device is opened on the kernel-socket port
# with a one-line notice.
if command -v setpriv >/dev/null; then
  out=$(timeout 30 setpriv --inh-caps=-all,+net_raw --ambient-caps=-all,+net_raw --bounding-set=-all,+net_raw \
        "$U" run -- ibv_devinfo -d urxe0 2>&1); rc=$?
  expect_rc "ibv_devinfo with only CAP_NET_RAW" 0 $rc
  check "  on the kernel-socket port, with a notice" "kernel-socket port" "$out"
fi

# --- link del
out=$("$U" link del urxe9 2>&1); expect_rc "del of a missing device" 1 $?
check "  lists the ones there are" "no urxe device 'urxe9'.*there are: urxe0, urxe1" "$out"
out=$("$U" link del urxe0 2>&1); expect_rc "link del urxe0" 0 $?
[ -e /dev/infiniband/uverbs0 ] && bad "uverbs0 still there after del" || ok "uverbs0 removed"
if [ $has_nft = 1 ]; then
  nft list table netdev urxe_va >/dev/null 2>&1 && bad "nftables table urxe_va still there after del" ||
    ok "link del removed the nftables ingress drop"
fi
out=$("$U" link show 2>&1)
check "only urxe1 left" "^link urxe1/1" "$out"
printf '%s\n' "$out" | grep -q urxe0 && bad "urxe0 still listed" || ok "urxe0 gone from link show"
"$U" link del urxe1 >/dev/null 2>&1; expect_rc "link del urxe1" 0 $?

# Without CAP_NET_ADMIN: created, no nftables table, and a notice saying so.
if command -v setpriv >/dev/null; then
  out=$(setpriv --inh-caps=-all,+net_raw,+mknod --ambient-caps=-all,+net_raw,+mknod \
        --bounding-set=-all,+net_raw,+mknod,+dac_override "$U" link add urxe2 netdev va 2>&1); rc=$?
  expect_rc "link add without CAP_NET_ADMIN" 0 $rc
  check "  says there is no ingress drop" "no CAP_NET_ADMIN" "$out"
  if [ $has_nft = 1 ]; then
    nft list table netdev urxe_va >/dev/null 2>&1 && bad "  but installed a table" || ok "  and installed none"
  fi
  "$U" link del urxe2 >/dev/null 2>&1
fi

[ $fail = 0 ] && echo "cli_link_test: all checks passed"
exit $fail
