# Network namespaces and veth pairs for the tests that run urxe between interfaces (sourced by POSIX sh
# scripts: `. "$(dirname "$0")/../lib/netns.sh"`). Everything a script creates through it is removed when the
# script exits, also on SIGINT/SIGTERM. Register a script's own cleanup with netns_at_exit.
#
#   netns_require_root                      SKIP (exit 77) unless root
#   netns_private "$0" "$@"                 re-run the script in private mount + network namespaces (once);
#                                           /dev/infiniband exists as a mount point
#   netns_veth IF_A IF_B [ADDR_A [ADDR_B]]  a veth pair in this namespace, MTU $URXE_TEST_MTU (default 1500),
#                                           lo and both ends up (ADDR: CIDR, e.g. 10.77.0.1/24)
#   netns_pair NS_A NS_B IF_A IF_B ADDR_A ADDR_B
#                                           two new namespaces joined by a veth IF_A (in NS_A) <-> IF_B (in
#                                           NS_B), with addresses, MTU $URXE_TEST_MTU, lo and both ends up;
#                                           at exit their processes are killed and both are deleted
#   netns_wait_up [NS] IF                   wait (at most 10 s) until IF has its carrier ("" = this namespace)
#   netns_urxe_side NS IF OUT URXE SO "LINK OPTIONS" CMD...
#                                           CMD in NS with its own mount namespace (tmpfs on /dev/infiniband,
#                                           a fresh URXE_RUN_DIR), urxe0 on IF (`URXE link add urxe0 netdev IF
#                                           OPTIONS`), the environment `URXE env` prints, a 60 s timeout;
#                                           stdout and stderr to OUT
#   netns_at_exit 'SHELL CODE'              run at exit (last registered runs first)

_netns_exit=""
_netns_created=""

_netns_run_exit() {
  set +e
  eval "$_netns_exit"
}

netns_at_exit() {
  _netns_exit="$1
$_netns_exit"
  trap _netns_run_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

netns_require_root() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces, veths, /dev/infiniband)"; exit 77; }
}

netns_private() {
  [ "${URXE_IN_NETNS:-}" = 1 ] && return 0
  netns_require_root
  mkdir -p /dev/infiniband
  URXE_IN_NETNS=1 exec unshare --mount --net --propagation private "$@"
}

netns_veth() {  # netns_veth IF_A IF_B [ADDR_A [ADDR_B]]
  ip link set lo up || return 1
  ip link add "$1" type veth peer name "$2" || return 1
  ip link set "$1" mtu "${URXE_TEST_MTU:-1500}"
  ip link set "$2" mtu "${URXE_TEST_MTU:-1500}"
  [ -z "${3:-}" ] || ip addr add "$3" dev "$1" || return 1
  [ -z "${4:-}" ] || ip addr add "$4" dev "$2" || return 1
  ip link set "$1" up && ip link set "$2" up
}

_netns_delete() {
  for _ns in $_netns_created; do
    for _p in $(ip netns pids "$_ns" 2>/dev/null); do kill -9 "$_p" 2>/dev/null; done
    ip netns del "$_ns" 2>/dev/null
  done
}

netns_pair() {  # netns_pair NS_A NS_B IF_A IF_B ADDR_A ADDR_B
  [ -n "$_netns_created" ] || netns_at_exit _netns_delete
  ip netns add "$1" || return 1
  _netns_created="$_netns_created $1"
  ip netns add "$2" || return 1
  _netns_created="$_netns_created $2"
  ip link add "$3" netns "$1" type veth peer name "$4" netns "$2" || return 1
  ip -n "$1" link set "$3" mtu "${URXE_TEST_MTU:-1500}"
  ip -n "$2" link set "$4" mtu "${URXE_TEST_MTU:-1500}"
  ip -n "$1" addr add "$5" dev "$3" || return 1
  ip -n "$2" addr add "$6" dev "$4" || return 1
  ip -n "$1" link set lo up && ip -n "$2" link set lo up &&
    ip -n "$1" link set "$3" up && ip -n "$2" link set "$4" up
}

netns_wait_up() {  # netns_wait_up [NS] IF: `urxe link add` reads the port state from the interface
  if [ $# -ge 2 ]; then
    _ns=$1
    shift
  else
    _ns=""
  fi
  _i=0
  while [ $_i -lt 200 ]; do
    if [ -n "$_ns" ]; then
      ip -n "$_ns" -o link show "$1" | grep -q "state UP" && return 0
    else
      ip -o link show "$1" | grep -q "state UP" && return 0
    fi
    sleep 0.05
    _i=$((_i + 1))
  done
  return 1
}

netns_urxe_side() {  # netns_urxe_side NS IF OUT URXE SO "LINK OPTIONS" CMD...
  _ns=$1 _if=$2 _out=$3 _urxe=$4 _so=$5 _opts=$6
  shift 6
  ip netns exec "$_ns" unshare --mount --propagation private sh -c '
    mount -t tmpfs urxe-test /dev/infiniband || exit 1
    export URXE_RUN_DIR=$(mktemp -d /tmp/urxe-run.XXXXXX) URXE_PROVIDER="$1"
    trap "rm -rf \"\$URXE_RUN_DIR\"" EXIT
    # shellcheck disable=SC2086
    "$2" link add urxe0 netdev "$3" $4 >/dev/null || exit 1
    eval "$("$2" env)"
    shift 4
    timeout 60 "$@"' side "$_so" "$_urxe" "$_if" "$_opts" "$@" >"$_out" 2>&1
}
