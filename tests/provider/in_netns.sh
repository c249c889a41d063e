#!/bin/sh
# Runs a provider test in private mount + network namespaces: tmpfs on /dev/infiniband, a veth pair
# va (10.77.0.1/24) <-> vb (10.77.0.2/24) with MTU $URXE_TEST_MTU (default 1500), urxe0 on va, and the
# environment `urxe env` prints (URXE_TEST_HAIRPIN below). Then runs "$@" with $TEST_BIN_DIR on PATH.
# Nothing on the host changes except that an empty /dev/infiniband directory may be created as a mount point.
#   usage: in_netns.sh DEVCTL PROVIDER_SO CMD [ARGS...]
set -eu
. "$(dirname "$0")/../lib/netns.sh"
netns_private "$0" "$@"
devctl=$1; so=$2; shift 2
# IPv6 off (a GID table that does not change over the run); the run directory mode 755: the tree must be
# readable by unprivileged apps too.
netns_private_veth run urxe-provider-test 10.77.0.1/24 10.77.0.2/24
# URXE_TEST_HAIRPIN=1: vb becomes a port of a bridge that sends frames back out the port they came in
# (hairpin), so frames from urxe0 to itself leave through va and come back in through it: a real port's
# traffic for tests whose QPs all live on urxe0 (with URXE_LOCAL_PATH=0, nothing goes through shared memory).
if [ "${URXE_TEST_HAIRPIN:-0}" = 1 ]; then
  ip addr flush dev vb
  ip link add br0 type bridge
  ip link set vb master br0
  bridge link set dev vb hairpin on
  ip link set br0 up
fi
export URXE_RUN_DIR="$run" URXE_PROVIDER="$so" URXE_DEVCTL="$devctl"
"$devctl" link add urxe0 netdev va --port "${URXE_TEST_PORT:-loop}" >/dev/null
eval "$("$devctl" env)"
"$@"
