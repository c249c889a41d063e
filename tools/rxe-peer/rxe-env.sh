# rxe-env.sh - settings and helpers shared by the rxe peer scripts (sourced, not executed).
# The state lives under ~/.cache/urxe/rxe-peer, peers may get an IPv6 ULA address, a lock serialises
# start/stop, and PIDs are checked to be our QEMU before they are signalled.
# Every setting can be overridden from the environment.
STATE=${URXE_RXE_PEER_DIR:-${RXE_PEER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/urxe/rxe-peer}}
GUEST_DIR=${GUEST_DIR:-$STATE/guest}        # vmlinuz + initrd.img from build-guest.sh
RUN_DIR=${RUN_DIR:-$STATE/run}              # one sub-directory per running peer
NETNS=${NETNS:-urxe-rxenet}                 # host-side network namespace (created on demand); not the
                                            # common "rxenet", so both can be used at once
BRIDGE=${BRIDGE:-rxebr0}                    # L2 bridge inside $NETNS joining all peers
SUBNET=${SUBNET:-10.77.0}                   # /24 used only inside $NETNS
SUBNET6=${SUBNET6:-fd77::}                  # ULA /64 used only inside $NETNS
HOST_IP=${HOST_IP:-$SUBNET.1/24}            # address of $BRIDGE (the host's end of the link)
HOST_IP6=${HOST_IP6:-${SUBNET6}1/64}
MTU=${MTU:-1500}                            # netdev MTU (rxe IB MTU = largest of 256..4096 <= MTU - 80)
MEM=${MEM:-768}                             # guest RAM (MiB); the ~45 MiB initramfs lives in RAM
SMP=${SMP:-1}                               # guest vCPUs
BOOT_TIMEOUT=${BOOT_TIMEOUT:-240}           # seconds from QEMU start to a ready rxe0 + agent
# ACCEL: kvm only if a hardware KVM module (kvm_intel/kvm_amd) is present. Where /dev/kvm is backed by a
# paravirtual KVM (kvm_pvm) a stock kernel runs far slower than under TCG.
if [[ -z ${ACCEL:-} ]]; then
  if [[ -e /sys/module/kvm_intel || -e /sys/module/kvm_amd ]]; then ACCEL=kvm; else ACCEL=tcg; fi
fi

# Peer N (1..200): data IP $SUBNET.(10+N), IPv6 $SUBNET6(10+N in hex), MAC 52:54:00:77:00:NN, tap rxetapN,
# control port 7700+N on 127.0.0.1 inside $NETNS (QEMU user-net hostfwd -> guest agent).
peer_ip()     { echo "$SUBNET.$((10 + $1))"; }
peer_ip6()    { printf '%s%x\n' "$SUBNET6" $((0x10 + $1)); }
peer_mac()    { printf '52:54:00:77:00:%02x' "$1"; }
peer_ctlmac() { printf '52:54:00:77:01:%02x' "$1"; }
peer_tap()    { echo "rxetap$1"; }
peer_port()   { echo $((7700 + $1)); }
peer_dir()    { echo "$RUN_DIR/peer$1"; }
nsx()         { ip netns exec "$NETNS" "$@"; }

# peer_pid N: the PID of peer N's QEMU if it is running and really is that QEMU (the pidfile may be stale
# and its PID reused by an unrelated process, which must never be signalled).
peer_pid() {
  local f pid
  f=$(peer_dir "$1")/qemu.pid
  pid=$(cat "$f" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-name rxe-peer$1 " || return 1
  echo "$pid"
}

# with_lock CMD...: run CMD holding $STATE/lock, so concurrent start/stop calls do not race on the
# namespace, the bridge or the taps. Bounded: gives up after 300 s.
with_lock() {
  mkdir -p "$STATE"
  (
    flock -w 300 9 || { echo "rxe-peer: lock $STATE/lock busy for 300 s" >&2; exit 1; }
    "$@"
  ) 9>"$STATE/lock"
}

# Create the namespace + bridge once (idempotent).
ensure_netns() {
  ip netns list | grep -qw "^$NETNS" || ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  if ! ip -n "$NETNS" link show "$BRIDGE" >/dev/null 2>&1; then
    # fixed MAC, otherwise the bridge takes the lowest MAC of its ports
    ip -n "$NETNS" link add "$BRIDGE" address "${BRIDGE_MAC:-52:54:00:77:00:fe}" type bridge stp_state 0 forward_delay 0
    ip -n "$NETNS" link set "$BRIDGE" mtu "$MTU" up
    ip -n "$NETNS" addr add "$HOST_IP" dev "$BRIDGE"
    ip -n "$NETNS" -6 addr add "$HOST_IP6" dev "$BRIDGE" nodad 2>/dev/null || true
  fi
}
