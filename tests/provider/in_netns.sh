#!/bin/sh
# Runs a provider test in private mount + network namespaces: tmpfs on /dev/infiniband, a veth pair
# va (10.77.0.1/24) <-> vb (10.77.0.2/24) with MTU $URXE_TEST_MTU (default 1500), urxe0 on va, and the
# environment `urxe env` prints. Then runs "$@" with $TEST_BIN_DIR on PATH. Nothing on the host changes
# except that an empty /dev/infiniband directory may be created as a mount point.
#   usage: in_netns.sh DEVCTL PROVIDER_SO CMD [ARGS...]
set -eu
if [ "${URXE_IN_NETNS:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces, mknod)"; exit 77; }
  mkdir -p /dev/infiniband
  URXE_IN_NETNS=1 exec unshare --mount --net --propagation private "$0" "$@"
fi
devctl=$1; so=$2; shift 2
mount -t tmpfs -o mode=755 urxe-test /dev/infiniband
ip link set lo up
ip link add va type veth peer name vb
ip link set va mtu "${URXE_TEST_MTU:-1500}"
ip link set vb mtu "${URXE_TEST_MTU:-1500}"
# IPv6 off: its link-local address appears after DAD and would make the GID table time-dependent.
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
ip addr add 10.77.0.1/24 dev va
ip addr add 10.77.0.2/24 dev vb
ip link set va up
ip link set vb up
run=$(mktemp -d /tmp/urxe-provider-test.XXXXXX)
trap 'rm -rf "$run"' EXIT
chmod 755 "$run"  # the tree must be readable by unprivileged apps too
export URXE_RUN_DIR="$run" URXE_PROVIDER="$so" URXE_DEVCTL="$devctl"
"$devctl" link add urxe0 netdev va --port "${URXE_TEST_PORT:-loop}" >/dev/null
eval "$("$devctl" env)"
"$@"
