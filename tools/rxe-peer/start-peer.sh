#!/bin/bash
# start-peer.sh N [N...] - boot kernel Soft-RoCE peer VM(s) number N (1..200).
# Bounded waits throughout (BOOT_TIMEOUT covers
# boot and agent), a peer that fails to come up is stopped again (its QEMU only, by its verified PID) and
# so are the peers of this call when it is interrupted, a lock around namespace/tap setup, an IPv6 ULA
# address on the guest NIC, and a machine-readable peer.env per peer.
#
# Each peer is a QEMU guest (Debian 6.1 kernel + busybox initramfs from build-guest.sh) with
#   - eth0: virtio-net on tap rxetapN, bridged into $BRIDGE in netns $NETNS,
#           IP $SUBNET.(10+N)/24 and ${SUBNET6}(10+N hex)/64, MAC 52:54:00:77:00:NN, and rxe0 bound to it;
#   - ctl0: QEMU user-mode net (restrict=on, no outside access) carrying only the
#           control agent: 127.0.0.1:(7700+N) inside $NETNS -> guest 10.0.2.15:7777.
# The host end of the RoCE link is $BRIDGE ($HOST_IP) inside $NETNS: run your own stack with
# `ip netns exec $NETNS ...` on $BRIDGE, or add your own veth to the bridge.
#
# Prints one READY block per peer (IP, MAC and GIDs) with the boot-to-ready time; exits 0 only when every
# requested peer is ready. Settings: see rxe-env.sh (MTU, MEM, SMP, ACCEL, NETNS, BOOT_TIMEOUT, ...).
# EXTRA_INITRD=FILE (optional): a newc cpio archive unpacked after the guest's own (the kernel unpacks
# concatenated initramfs archives in order), e.g. urxe from urxe-cpio.sh; the guest itself is unchanged.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/rxe-env.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 N [N...]" >&2; exit 2; }
[[ -f $GUEST_DIR/vmlinuz && -f $GUEST_DIR/initrd.img ]] || { echo "no guest in $GUEST_DIR: run build-guest.sh first" >&2; exit 1; }
EXTRA_INITRD=${EXTRA_INITRD:-}
[[ -z $EXTRA_INITRD || -f $EXTRA_INITRD ]] || { echo "EXTRA_INITRD $EXTRA_INITRD not found" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 not found (apt-get install qemu-system-x86)" >&2; exit 1; }
for n in "$@"; do
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || { echo "bad peer number $n" >&2; exit 2; }
done

started=()     # peers this call launched: stopped again if we fail or are interrupted
on_abort() {
  trap - INT TERM
  [[ -f $STATE/.started.$$ ]] && mapfile -t started <"$STATE/.started.$$"
  rm -f "$STATE/.started.$$"
  ((${#started[@]})) && "$HERE/stop-peer.sh" "${started[@]}" >&2
  exit 1
}
trap on_abort INT TERM

launch() {  # launch N: tap + QEMU (daemonized); under the lock
  local n=$1 d tap
  d=$(peer_dir "$n")
  tap=$(peer_tap "$n")
  if peer_pid "$n" >/dev/null; then
    echo "peer$n already running (pid $(peer_pid "$n"))" >&2
    return 3
  fi
  rm -rf "$d"
  mkdir -p "$d"
  # persistent tap inside the namespace, enslaved to the bridge
  ip -n "$NETNS" link del "$tap" 2>/dev/null || true
  ip -n "$NETNS" tuntap add dev "$tap" mode tap
  ip -n "$NETNS" link set "$tap" mtu "$MTU" master "$BRIDGE" up
  peer_port "$n" >"$d/ctl.port"
  local initrd=$GUEST_DIR/initrd.img
  if [[ -n $EXTRA_INITRD ]]; then  # the guest's archive, then the extra one (both uncompressed newc)
    initrd=$d/initrd.img
    cat "$GUEST_DIR/initrd.img" "$EXTRA_INITRD" >"$initrd"
  fi
  # csum=off,guest_csum=off: no checksum/segmentation offload on the virtual NIC,
  # so what the host sees on the tap is exactly what a real wire would carry.
  nsx qemu-system-x86_64 \
    -name "rxe-peer$n" -accel "$ACCEL" -cpu max -smp "$SMP" -m "$MEM" \
    -M pc -nodefaults -no-user-config -display none -no-reboot \
    -daemonize -pidfile "$d/qemu.pid" \
    -kernel "$GUEST_DIR/vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 rxe.name=peer$n rxe.ip=$(peer_ip "$n")/24 rxe.ip6=$(peer_ip6 "$n")/64 rxe.mac=$(peer_mac "$n") rxe.ctlmac=$(peer_ctlmac "$n") rxe.mtu=$MTU" \
    -serial "file:$d/console.log" \
    -qmp "unix:$d/qmp.sock,server=on,wait=off" \
    -netdev "tap,id=data,ifname=$tap,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=data,mac=$(peer_mac "$n"),addr=3,romfile=,csum=off,guest_csum=off" \
    -netdev "user,id=ctl,restrict=on,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:$(peer_port "$n")-10.0.2.15:7777" \
    -device "virtio-net-pci,netdev=ctl,mac=$(peer_ctlmac "$n"),addr=4,romfile=" \
    2>"$d/qemu.err" 9>&-   # QEMU must not inherit (and so keep) the lock
}
setup() {
  ensure_netns
  local n rc
  for n in "$@"; do
    rc=0
    launch "$n" || rc=$?
    if ((rc == 0)); then
      echo "$n" >>"$STATE/.started.$$"
    elif ((rc != 3)); then
      echo "peer$n: QEMU failed to start: $(cat "$(peer_dir "$n")/qemu.err" 2>/dev/null)" >&2
    fi
  done
}

declare -A T0
rm -f "$STATE/.started.$$"
for n in "$@"; do T0[$n]=$(date +%s.%N); done
with_lock setup "$@"
[[ -f $STATE/.started.$$ ]] && mapfile -t started <"$STATE/.started.$$"
rm -f "$STATE/.started.$$"

rc=0
for n in "$@"; do
  running=0
  for s in "${started[@]}"; do [[ $s == "$n" ]] && running=1; done
  if ((!running)); then
    peer_pid "$n" >/dev/null || rc=1
    continue
  fi
  d=$(peer_dir "$n")
  deadline=$(($(date +%s) + BOOT_TIMEOUT))
  ok=0
  while (($(date +%s) < deadline)); do
    if grep -q RXE-PEER-READY "$d/console.log" 2>/dev/null; then ok=1; break; fi
    peer_pid "$n" >/dev/null || break
    sleep 0.2
  done
  if ((ok)); then
    tc=$(echo "$(date +%s.%N) - ${T0[$n]}" | bc)
    # the control agent must answer too
    ok=0
    while (($(date +%s) < deadline)); do
      if timeout 10 "$HERE/peer-exec.sh" "$n" true >/dev/null 2>&1; then ok=1; break; fi
      sleep 0.2
    done
  fi
  if ((ok)); then
    t=$(echo "$(date +%s.%N) - ${T0[$n]}" | bc)
    printf 'peer%s READY in %.1fs (rxe0 active after %.1fs; accel=%s, mtu=%s)\n' "$n" "$t" "$tc" "$ACCEL" "$MTU"
    sed -n '/RXE-PEER-READY/,$p' "$d/console.log" | tr -d '\r' | sed 's/^/  /'
    printf '%.1f\n' "$t" >"$d/boot-time"
    {
      echo "PEER=$n"
      echo "PEER_IP=$(peer_ip "$n")"
      echo "PEER_IP6=$(peer_ip6 "$n")"
      echo "PEER_MAC=$(peer_mac "$n")"
      echo "PEER_TAP=$(peer_tap "$n")"
      echo "PEER_MTU=$MTU"
      echo "BOOT_SECONDS=$t"
    } >"$d/peer.env"
  else
    echo "peer$n FAILED to become ready within ${BOOT_TIMEOUT}s; console tail:" >&2
    tail -n 20 "$d/console.log" 2>/dev/null | tr -d '\r' | sed 's/^/  /' >&2
    cat "$d/qemu.err" >&2 2>/dev/null || true
    "$HERE/stop-peer.sh" "$n" >&2
    rc=1
  fi
done
trap - INT TERM
exit $rc
