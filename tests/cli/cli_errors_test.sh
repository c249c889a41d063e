#!/bin/sh
# The errors and warnings of `urxe` that depend on privileges and on the host, each provoked for real in a
# private mount + network namespace (tmpfs on /dev/infiniband, veth va 10.67.0.1 <-> vb): exit status and
# a message that names what is wrong and how to fix it.
#   - link add / del as an unprivileged user (no write access to /dev/infiniband)
#   - /dev/infiniband read-only for root (a container's /dev), the run directory read-only
#   - no CAP_NET_RAW: `urxe run` warns, the application's open fails naming the capability; a root with
#     NET_RAW dropped from its bounding set (docker --cap-drop NET_RAW) too; loop-port devices need nothing
#   - kernel RDMA loaded (libibverbs then ignores SYSFS_PATH): warned by link add, env (stdout stays
#     eval-able) and run; forced with URXE_TEST_KERNEL_RDMA=1, and without it the warning must appear
#     exactly when this kernel answers NETLINK_RDMA
#   - a device whose /dev node or interface is missing in this namespace (made elsewhere): run/env warn
#   - device not found for show / refresh / del, unknown options
#   usage: cli_errors_test.sh URXE
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v setpriv >/dev/null || { echo "SKIP: setpriv missing (util-linux)"; exit 77; }
command -v ibv_devinfo >/dev/null || { echo "SKIP: ibv_devinfo missing (apt-get install ibverbs-utils)"; exit 77; }
netns_private -t 100 "$0" "$@"
U=$1
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH URXE_TEST_KERNEL_RDMA
. "$(dirname "$0")/../lib/check.sh"
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

netns_private_veth tmp urxe-cli-errors 10.67.0.1/24 || exit 1
netns_at_exit 'umount "$tmp/ro" 2>/dev/null'
export URXE_RUN_DIR=$tmp/run

# --- unprivileged user: no write access to /dev/infiniband
out=$(nobody "$U" link add urxe0 netdev va 2>&1); expect_rc "link add as an unprivileged user fails" 1 $?
check "  naming /dev/infiniband and saying to run as root" "cannot write /dev/infiniband.*Permission denied.*Run it as root" "$out"
[ -z "$("$U" link show 2>&1)" ] && ok "  and created nothing" || bad "  but a device exists"

# --- root, read-only /dev/infiniband (a container's /dev)
mount -o remount,ro /dev/infiniband
out=$("$U" link add urxe0 netdev va 2>&1); expect_rc "link add with a read-only /dev/infiniband fails" 1 $?
check "  saying why and how to make it writable" "cannot write /dev/infiniband: Read-only file system.*--tmpfs /dev/infiniband" "$out"
mount -o remount,rw /dev/infiniband

# --- root, read-only run directory
mkdir -p "$tmp/ro" && mount -t tmpfs -o ro urxe-cli-errors-ro "$tmp/ro"
out=$(URXE_RUN_DIR=$tmp/ro/run "$U" link add urxe0 netdev va 2>&1); expect_rc "link add with a read-only run directory fails" 1 $?
check "  naming it and URXE_RUN_DIR" "cannot write the run directory $tmp/ro/run.*Read-only file system.*URXE_RUN_DIR" "$out"

# --- kernel RDMA (SYSFS_PATH ignored by libibverbs)
out=$(URXE_TEST_KERNEL_RDMA=1 "$U" link add urxe0 netdev va --port socket 2>&1); expect_rc "link add on a kernel with RDMA still creates the device" 0 $?
check "  and warns that libibverbs ignores SYSFS_PATH, with the fix" "ignores SYSFS_PATH.*modprobe -r .*ib_core" "$out"
URXE_TEST_KERNEL_RDMA=1 "$U" env >"$tmp/env.out" 2>"$tmp/env.err"; expect_rc "env on a kernel with RDMA" 0 $?
check "  stdout is still only export lines" "^export SYSFS_PATH=" "$(cat "$tmp/env.out")"
check_not "  with no warning on stdout" "warning" "$(cat "$tmp/env.out")"
check "  the warning is on stderr" "urxe env: warning: .*ignores SYSFS_PATH" "$(cat "$tmp/env.err")"
out=$(URXE_TEST_KERNEL_RDMA=1 "$U" run -- true 2>&1); expect_rc "run on a kernel with RDMA still runs CMD" 0 $?
check "  after the warning" "urxe run: warning: .*ignores SYSFS_PATH" "$out"
# Without the override the warning must follow the kernel: NETLINK_RDMA (20) opens iff ib_core is there.
if /usr/bin/python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20)' 2>/dev/null; then
  kernel_rdma=1; else kernel_rdma=0; fi
out=$("$U" run -- true 2>&1)
if [ $kernel_rdma = 1 ]; then
  check "this kernel answers NETLINK_RDMA: run warns" "ignores SYSFS_PATH" "$out"
else
  check_not "this kernel has no NETLINK_RDMA: no kernel-RDMA warning" "SYSFS_PATH" "$out"
fi

# --- CAP_NET_RAW (urxe0 is on the socket port, it moves real packets)
chmod -R a+rX "$URXE_RUN_DIR"
out=$(nobody timeout 30 "$U" run -- ibv_devinfo -d urxe0 2>&1); rc=$?
[ $rc != 0 ] && ok "ibv_devinfo -d urxe0 without CAP_NET_RAW fails (exit $rc)" || bad "ibv_devinfo without CAP_NET_RAW succeeded"
check "  urxe run warned first, naming the device and the fix" \
  "urxe run: warning: no CAP_NET_RAW, so applications cannot open urxe0 \(port socket on va\).*--ambient-caps=\+net_raw" "$out"
check "  the provider's own error names the capability" "urxe0.*CAP_NET_RAW" "$out"
out=$(nobody --inh-caps=+net_raw --ambient-caps=+net_raw timeout 30 "$U" run -- ibv_devinfo -d urxe0 2>&1)
expect_rc "the suggested fix (ambient CAP_NET_RAW) lets the same user open urxe0" 0 $?
check_not "  with no warning" "warning: no CAP_NET_RAW" "$out"
out=$(setpriv --bounding-set=-net_raw timeout 30 "$U" run -- ibv_devinfo -d urxe0 2>&1); rc=$?
[ $rc != 0 ] && ok "root with NET_RAW dropped (docker --cap-drop NET_RAW): ibv_devinfo fails (exit $rc)" || bad "root without NET_RAW: ibv_devinfo succeeded"
check "  with the warning" "no CAP_NET_RAW" "$out"
out=$(timeout 30 "$U" run -- ibv_devinfo -d urxe0 2>&1); expect_rc "root: ibv_devinfo -d urxe0" 0 $?
check_not "  without a CAP_NET_RAW warning" "CAP_NET_RAW" "$out"
"$U" link del urxe0 >/dev/null 2>&1
"$U" link add urxe1 netdev va --port loop >/dev/null 2>&1
chmod -R a+rX "$URXE_RUN_DIR"
out=$(nobody timeout 30 "$U" run -- ibv_devinfo -d urxe1 2>&1); expect_rc "unprivileged ibv_devinfo on a loop-port device" 0 $?
check_not "  needs no CAP_NET_RAW and gets no warning" "CAP_NET_RAW" "$out"

# --- devices this namespace cannot use: /dev node missing, interface missing
node=$("$U" link show urxe1 | sed -n 's/.* dev \(uverbs[0-9]*\).*/\1/p')
rm -f "/dev/infiniband/$node"
out=$("$U" run -- true 2>&1); expect_rc "run with urxe1's /dev node missing still runs CMD" 0 $?
check "  warning that libibverbs skips urxe1, with the fix" \
  "warning: urxe1 has no device node /dev/infiniband/$node.*urxe link del urxe1 && urxe link add urxe1 netdev va" "$out"
"$U" link del urxe1 >/dev/null 2>&1 && "$U" link add urxe1 netdev va --port loop >/dev/null 2>&1
netns_veth vc vd
"$U" link add urxe3 netdev vc --port loop >/dev/null 2>&1; expect_rc "link add urxe3 netdev vc" 0 $?
ip link del vc
out=$("$U" env 2>&1 >/dev/null); expect_rc "env with urxe3's interface gone" 0 $?
check "  warns that vc is not in this network namespace" "warning: urxe3's interface vc is not in this network namespace" "$out"
out=$("$U" run -- true 2>&1)
check "  run warns too" "urxe run: warning: urxe3's interface vc" "$out"
check_not "  and says nothing about urxe1, which is fine" "urxe1" "$out"
"$U" link del urxe3 >/dev/null 2>&1; expect_rc "link del urxe3 (interface gone)" 0 $?
chmod -R a+rX "$URXE_RUN_DIR"

# --- unprivileged link del
out=$(nobody "$U" link del urxe1 2>&1); expect_rc "link del as an unprivileged user fails" 1 $?
check "  saying to run as root" "cannot write /dev/infiniband.*Run it as root" "$out"
"$U" link show urxe1 >/dev/null 2>&1; expect_rc "  and urxe1 is still there" 0 $?

# --- device not found / exists, unknown options
out=$("$U" link add urxe2 netdev eth9 2>&1); expect_rc "link add on a missing interface" 1 $?
check "  names it and lists the interfaces there are" "no interface 'eth9' in this network namespace \(there are: lo, (va, vb|vb, va);" "$out"
out=$("$U" link show nosuch 2>&1); expect_rc "link show of a missing device" 1 $?
check "  lists the ones there are" "no urxe device 'nosuch'.*there are: urxe1.*URXE_RUN_DIR" "$out"
out=$("$U" link refresh nosuch 2>&1); expect_rc "link refresh of a missing device" 1 $?
check "  names it" "no urxe device 'nosuch'" "$out"
out=$("$U" link add urxe1 netdev vb 2>&1); expect_rc "link add of an existing name" 1 $?
check "  says where it is and how to remove it" "device 'urxe1' already exists \(on va.*urxe link del urxe1" "$out"
out=$("$U" link del --force 2>&1); expect_rc "link del --force (no such option)" 2 $?
check "  is an unknown option" "unknown option '--force'" "$out"
out=$("$U" link add urxe2 netdev va --colour red 2>&1); expect_rc "link add with an unknown option" 2 $?
check "  lists the valid ones" "unknown option '--colour' \(valid: --dpdk" "$out"

# --- each command's options, by one getopt_long parser: the same errors, values as the next word or after
# '=', whole option names only, and nothing after `run`'s CMD read as urxe's
out=$("$U" link add urxe2 netdev va --mtu 2>&1); expect_rc "link add --mtu without a value" 2 $?
check "  says it needs one" "urxe link add: --mtu needs a value" "$out"
out=$("$U" link add urxe2 netdev va --mtu=100 2>&1); expect_rc "link add --mtu=100" 2 $?
check "  checks the value after '='" "urxe link add: --mtu '100' is not an Ethernet MTU" "$out"
out=$("$U" link add urxe2 netdev va --mt 9000 2>&1); expect_rc "link add --mt (an abbreviation)" 2 $?
check "  is an unknown option" "unknown option '--mt' \(valid: " "$out"
out=$("$U" link show urxe1 -x 2>&1); expect_rc "link show urxe1 -x" 2 $?
check "  is an unknown option" "urxe link show: unknown option '-x'" "$out"
out=$("$U" link watch urxe1 2>&1); expect_rc "link watch NAME" 2 $?
check "  is too many arguments" "urxe link watch: too many arguments" "$out"
out=$("$U" link del urxe1 urxe2 2>&1); expect_rc "link del with two names" 2 $?
check "  wants exactly one" "urxe link del: expected exactly one device NAME" "$out"
out=$("$U" env --driver=yes 2>&1); expect_rc "env --driver=yes" 2 $?
check "  is an unknown argument" "urxe env: unknown argument '--driver=yes'" "$out"
out=$("$U" run --colour -- true 2>&1); expect_rc "run --colour" 2 $?
check "  is an unknown option, with the fix" "urxe run: unknown option '--colour' \(put '--' before the command\)" "$out"
out=$("$U" run -- sh -c 'echo "$0 $*"' --help -x --colour 2>/dev/null); expect_rc "run -- CMD --help -x --colour" 0 $?
check "  passes CMD's options untouched" "^--help -x --colour$" "$out"
out=$("$U" run sh -c 'exit 3' --help 2>/dev/null); expect_rc "run CMD --help (no '--') runs CMD" 3 $?
out=$("$U" stats urxe1 --colour 2>&1); expect_rc "stats --colour" 2 $?
check "  is an unknown option" "urxe stats: unknown option '--colour' \('urxe stats --help' lists the options\)" "$out"
out=$("$U" stats urxe1 -pp 2>&1); expect_rc "stats -pp (bundled)" 2 $?
check "  is an unknown option" "urxe stats: unknown option '-pp'" "$out"
out=$("$U" stats urxe1 --count 2>&1); expect_rc "stats --count without a value" 2 $?
check "  says what it needs" "urxe stats: --count needs a whole number >= 1" "$out"
out=$("$U" stats urxe1 --watch 0 2>&1); expect_rc "stats --watch 0" 2 $?
check "  says the range" "urxe stats: --watch SECS must be 0.05 .. 86400" "$out"
out=$("$U" stats --watch 0.05 urxe1 --count 2 2>&1); expect_rc "stats --watch 0.05 NAME --count 2" 0 $?
[ "$(printf '%s\n' "$out" | grep -c '^urxe1: ')" = 2 ] && ok "  two rounds" || bad "  not two rounds: $out"
out=$("$U" stats --watch urxe1 --count=1 2>&1); expect_rc "stats --watch NAME --count=1 (NAME is no SECS)" 0 $?
check "  shows urxe1" "^urxe1: " "$out"
out=$("$U" stats -p --processes --json --watch=0.05 --count 1 urxe1 2>&1); expect_rc "stats -p --processes --json --watch=0.05" 0 $?
check "  one JSON line" '^\{"device":"urxe1"' "$out"
"$U" link del urxe1 >/dev/null 2>&1; expect_rc "link del urxe1" 0 $?

[ $fail = 0 ] && echo "cli_errors_test: all checks passed"
exit $fail
