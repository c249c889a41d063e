# Network namespaces and veth pairs for the tests that run urxe between interfaces (sourced by POSIX sh
# scripts: `. "$(dirname "$0")/../lib/netns.sh"`). Everything a script creates through it is removed when the
# script exits, also on SIGINT/SIGTERM. Register a script's own cleanup with netns_at_exit.
#
#   netns_require_root                      SKIP (exit 77) unless root
#   netns_private [-m] [-t SECS] "$0" "$@"  re-run the script in private mount + network namespaces (once);
#                                           /dev/infiniband exists as a mount point. -m: a private mount
#                                           namespace only (the script makes its network namespaces with
#                                           netns_pair); -t: the whole run killed after SECS
#   netns_devfs                             a tmpfs (mode 755) on /dev/infiniband: call after netns_private
#   netns_no_ipv6                           IPv6 off in this namespace (no link-local address appearing after
#                                           DAD: GID tables stay the same over the run)
#   netns_tmpdir VAR NAME                   VAR = a new directory /tmp/NAME.XXXXXX (mode 755, readable by
#                                           unprivileged apps), removed at exit
#   netns_veth [-n NS] IF_A IF_B [ADDR_A [ADDR_B]]
#                                           a veth pair in this namespace (-n: in namespace NS), MTU
#                                           $URXE_TEST_MTU (default 1500), lo and both ends up (ADDR: CIDR,
#                                           e.g. 10.77.0.1/24)
#   netns_private_veth VAR NAME ADDR_A [ADDR_B]
#                                           the usual start after netns_private: netns_devfs, netns_no_ipv6,
#                                           netns_veth va vb ADDR_A [ADDR_B], netns_tmpdir VAR NAME
#   netns_pair NS_A NS_B IF_A IF_B ADDR_A ADDR_B
#                                           two new namespaces joined by a veth IF_A (in NS_A) <-> IF_B (in
#                                           NS_B), with addresses, MTU $URXE_TEST_MTU, lo and both ends up
#                                           (returns once both have their carrier, netns_wait_up); at exit
#                                           their processes are killed and both are deleted
#   netns_fabric NS_A NS_B NS_F IF_A IF_B ADDR_A ADDR_B
#                                           like netns_pair, but through a third namespace NS_F standing for
#                                           the switch: IF_A <-> fa and IF_B <-> fb, fa and fb ports of the
#                                           bridge br0 in NS_F (rules on fa's/fb's egress act on the frames
#                                           towards A/B, like a switch's output port)
#   netns_wait_up [NS] IF                   wait (at most 10 s) until IF has its carrier ("" = this namespace)
#   netns_urxe_side NS IF OUT URXE SO "LINK OPTIONS" CMD...
#                                           CMD in NS with its own mount namespace (tmpfs on /dev/infiniband,
#                                           a fresh URXE_RUN_DIR), urxe0 on IF (`URXE link add urxe0 netdev IF
#                                           OPTIONS`), the environment `URXE env` prints, a 60 s timeout;
#                                           stdout and stderr to OUT. SO "" = the provider URXE finds itself
#   netns_urxe_side_in RUN_DIR NS IF OUT URXE SO "LINK OPTIONS" CMD...
#                                           the same in the run directory RUN_DIR, which stays: a later call
#                                           on the same RUN_DIR (urxe0 already there) only makes CMD's /dev
#                                           node, so apps one after the other share the device and counters.
#                                           $NETNS_URXE_DEV names the device instead of urxe0 (two namespaces
#                                           sharing one RUN_DIR need two names)
#   netns_wait_listen PID [NS] [PORT]       wait (at most 20 s) until a TCP listener on PORT (default 18515,
#                                           which ibverbs-utils and perftest use) exists in NS ("" or none =
#                                           this namespace), or until process PID (the server) has exited
#   netns_wait_for SECS CMD...              run CMD (a command or shell function) every 0.05 s until it
#                                           succeeds, at most SECS (whole) seconds: 0 once it did, else 1
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

netns_private() {  # netns_private [-m] [-t SECS] "$0" "$@"
  [ "${URXE_IN_NETNS:-}" = 1 ] && return 0
  netns_require_root
  _np_net=--net _np_timeout=""
  while [ $# -gt 0 ]; do  # bounded: each round takes one or two arguments
    case $1 in
      -m) _np_net=""; shift ;;
      -t) _np_timeout="timeout $2"; shift 2 ;;
      *) break ;;
    esac
  done
  mkdir -p /dev/infiniband
  # shellcheck disable=SC2086
  URXE_IN_NETNS=1 exec $_np_timeout unshare --mount $_np_net --propagation private "$@"
}

netns_devfs() {
  mount -t tmpfs -o mode=755 urxe-test /dev/infiniband
}

netns_no_ipv6() {
  sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
}

netns_tmpdir() {  # netns_tmpdir VAR NAME
  _nt_dir=$(mktemp -d "/tmp/$2.XXXXXX") || return 1
  chmod 755 "$_nt_dir"
  eval "$1=\$_nt_dir"
  netns_at_exit "rm -rf '$_nt_dir'"
}

_netns_ip() {  # ip in namespace $_nv_ns ("" = this one)
  if [ -n "$_nv_ns" ]; then ip -n "$_nv_ns" "$@"; else ip "$@"; fi
}

netns_veth() {  # netns_veth [-n NS] IF_A IF_B [ADDR_A [ADDR_B]]
  _nv_ns=""
  if [ "$1" = -n ]; then
    _nv_ns=$2
    shift 2
  fi
  _netns_ip link set lo up || return 1
  _netns_ip link add "$1" type veth peer name "$2" || return 1
  _netns_ip link set "$1" mtu "${URXE_TEST_MTU:-1500}"
  _netns_ip link set "$2" mtu "${URXE_TEST_MTU:-1500}"
  [ -z "${3:-}" ] || _netns_ip addr add "$3" dev "$1" || return 1
  [ -z "${4:-}" ] || _netns_ip addr add "$4" dev "$2" || return 1
  _netns_ip link set "$1" up && _netns_ip link set "$2" up
}

netns_private_veth() {  # netns_private_veth VAR NAME ADDR_A [ADDR_B]
  netns_devfs || return 1
  netns_no_ipv6
  netns_veth va vb "$3" "${4:-}" || return 1
  netns_tmpdir "$1" "$2"
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
    ip -n "$1" link set "$3" up && ip -n "$2" link set "$4" up || return 1
  netns_wait_up "$1" "$3" && netns_wait_up "$2" "$4"
}

netns_fabric() {  # netns_fabric NS_A NS_B NS_F IF_A IF_B ADDR_A ADDR_B
  [ -n "$_netns_created" ] || netns_at_exit _netns_delete
  for _ns in "$1" "$2" "$3"; do
    ip netns add "$_ns" || return 1
    _netns_created="$_netns_created $_ns"
    ip -n "$_ns" link set lo up || return 1
  done
  ip -n "$3" link add br0 type bridge || return 1
  ip -n "$3" link add fa type veth peer name "$4" netns "$1" || return 1
  ip -n "$3" link add fb type veth peer name "$5" netns "$2" || return 1
  for _p in fa fb; do
    ip -n "$3" link set "$_p" mtu "${URXE_TEST_MTU:-1500}" master br0 up || return 1
  done
  ip -n "$3" link set br0 up || return 1
  ip -n "$1" link set "$4" mtu "${URXE_TEST_MTU:-1500}"
  ip -n "$2" link set "$5" mtu "${URXE_TEST_MTU:-1500}"
  ip -n "$1" addr add "$6" dev "$4" && ip -n "$2" addr add "$7" dev "$5" || return 1
  ip -n "$1" link set "$4" up && ip -n "$2" link set "$5" up || return 1
  netns_wait_up "$1" "$4" && netns_wait_up "$2" "$5"
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
  netns_urxe_side_in "" "$@"
}

netns_urxe_side_in() {  # netns_urxe_side_in RUN_DIR NS IF OUT URXE SO "LINK OPTIONS" CMD...
  _run=$1 _ns=$2 _if=$3 _out=$4 _urxe=$5 _so=$6 _opts=$7 _fresh=""
  shift 7
  if [ -z "$_run" ]; then
    # Made and removed out here: the side's processes are killed (SIGKILL) when its namespace is deleted.
    _run=$(mktemp -d /tmp/urxe-run.XXXXXX) || return 1
    _fresh=$_run
  fi
  ip netns exec "$_ns" unshare --mount --propagation private sh -c '
    mount -t tmpfs urxe-test /dev/infiniband || exit 1
    export URXE_RUN_DIR="$1" URXE_PROVIDER="$2"
    if [ -e "$1/sys/class/infiniband/$6" ]; then  # a later app on the same device: its node only
      n=$("$3" link show "$6" | sed -n "s/.* dev uverbs\([0-9]*\).*/\1/p")
      mknod -m 666 "/dev/infiniband/uverbs${n:-0}" c 1 3 || exit 1
    else
      # shellcheck disable=SC2086
      "$3" link add "$6" netdev "$4" $5 >/dev/null || exit 1
    fi
    eval "$("$3" env)"
    shift 6
    timeout 60 "$@"' side "$_run" "$_so" "$_urxe" "$_if" "$_opts" "${NETNS_URXE_DEV:-urxe0}" "$@" >"$_out" 2>&1
  _rc=$?
  [ -z "$_fresh" ] || rm -rf "$_fresh"
  return $_rc
}

netns_wait_listen() {  # netns_wait_listen PID [NS] [PORT]
  _wl_i=0
  while [ $_wl_i -lt 400 ] && kill -0 "$1" 2>/dev/null; do
    if [ -n "${2:-}" ]; then
      [ -n "$(ip netns exec "$2" ss -Hltn "sport = :${3:-18515}")" ] && return 0
    else
      [ -n "$(ss -Hltn "sport = :${3:-18515}")" ] && return 0
    fi
    sleep 0.05
    _wl_i=$((_wl_i + 1))
  done
  return 1
}

netns_wait_for() {  # netns_wait_for SECS CMD...: at most SECS x 20 tries, and SECS + 1 s by the clock
  _wf_n=$(($1 * 20)) _wf_end=$(($(date +%s) + $1 + 1)) _wf_i=0
  shift
  until "$@"; do
    _wf_i=$((_wf_i + 1))
    [ $_wf_i -lt $_wf_n ] && [ "$(date +%s)" -lt $_wf_end ] || return 1
    sleep 0.05
  done
  return 0
}
