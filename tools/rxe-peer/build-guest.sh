#!/bin/bash
# build-guest.sh - build a tiny Debian-based guest (kernel + initramfs) that acts
# as a kernel Soft-RoCE (rdma_rxe) peer.
# State dir from rxe-env.sh; skips the build when the guest was built by this very script (use --force to rebuild);
# a lock against concurrent builds; ifb/mirred/ingress modules so netem can impair the guest's ingress
# too; an optional IPv6 address (rxe.ip6=) on the guest NIC.  Everything comes from Debian packages
# of the host's apt sources (bookworm); nothing is installed on the host except
# through apt-get for the host tools (qemu-system-x86, socat, tcpdump, cpio, kmod).
#
# Output (in $STATE/guest):
#   vmlinuz     Debian linux-image-6.1.0-*-amd64 kernel
#   initrd.img  uncompressed newc cpio (~43 MiB; uncompressed boots faster under
#               TCG): busybox-static (init + applets) + dash (/bin/sh) + rdma-core
#               user space (libibverbs1, ibverbs-providers (rxe), ibverbs-utils,
#               librdmacm1, rdmacm-utils, perftest), iproute2 (ip/rdma/tc), kmod,
#               socat, tcpdump, and only the kernel modules rxe + virtio need.
#   manifest.txt  package versions used
#
# Usage: ./build-guest.sh [--force]   (re-uses the .deb cache in $STATE/cache)
#        CLEAN_CACHE=1 ./build-guest.sh --force   (start from an empty cache)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/rxe-env.sh"
force=0
[[ ${1:-} == --force ]] && force=1
CACHE=$STATE/cache            # downloaded .debs + an empty dpkg status file
BUILD=$STATE/build/guest      # scratch tree
OUT=$STATE/guest              # result
ROOT=$BUILD/root              # guest root filesystem (becomes the initramfs)

# Guest user space.  rdma-core (the package) is NOT needed: it only carries
# systemd/udev glue; the verbs libraries + rxe provider live in libibverbs1 /
# ibverbs-providers.
# nftables: for urxe in the guest (vs-rxe.sh), whose `urxe link add` drops RoCE's UDP port at the
# interface's ingress with it by default, as on a host.
GUEST_PKGS="busybox-static dash libibverbs1 ibverbs-providers ibverbs-utils librdmacm1
            rdmacm-utils perftest iproute2 kmod socat tcpdump nftables"
KERNEL_META=linux-image-amd64
# Kernel modules to put in the initramfs (dependencies are resolved with modprobe).
GUEST_MODULES="virtio_pci virtio_net rdma_rxe ib_uverbs ib_umad rdma_ucm
               crc32_generic crc32_pclmul sch_netem sch_prio cls_u32 act_gact
               ifb act_mirred sch_ingress cls_matchall nf_tables"

log() { printf '[build-guest %(%T)T] %s\n' -1 "$*" >&2; }
t0=$(date +%s.%N)

# One build at a time; the guest is rebuilt only when this script changed (its hash is stored next to
# the result), so a second caller waiting on the lock finds the first one's result.
mkdir -p "$STATE"
exec 8>"$STATE/build.lock"
flock -w 600 8 || { log "another build holds $STATE/build.lock"; exit 1; }
SELF_HASH=$(sha256sum "$0" | cut -d' ' -f1)
if ((!force)) && [[ -f $OUT/vmlinuz && -f $OUT/initrd.img && $(cat "$OUT/script.sha256" 2>/dev/null) == "$SELF_HASH" ]]; then
  log "guest up to date in $OUT (--force rebuilds)"
  exit 0
fi
rm -f "$OUT/script.sha256"                # marks a build in progress (or failed) as not done

# --- 0. host tools -------------------------------------------------------------
need=()
for t in qemu-system-x86_64:qemu-system-x86 socat:socat tcpdump:tcpdump cpio:cpio \
         depmod:kmod dpkg-deb:dpkg; do
  command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if ((${#need[@]})); then
  log "installing host tools: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# --- 1. download the package closure into our own cache ------------------------
# A private, empty dpkg status file makes apt resolve the *full* dependency
# closure (as for an empty system) without touching the host's package state.
[[ ${CLEAN_CACHE:-0} == 1 ]] && rm -rf "$CACHE"
mkdir -p "$CACHE/debs/partial" "$CACHE/state"
: > "$CACHE/state/status"
APT=(apt-get -q -y -o Dir::State::status="$CACHE/state/status"
     -o Dir::Cache::archives="$CACHE/debs" -o Debug::NoLocking=1
     -o APT::Install-Recommends=false)
# resolve the kernel meta package to the real image package (linux-image-6.1.0-NN-amd64)
KPKG=$(apt-cache depends "$KERNEL_META" | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[[ -n $KPKG ]] || { log "cannot resolve $KERNEL_META"; exit 1; }
# the kernel's own dependencies (initramfs-tools, ...) are not wanted: download only the image
log "downloading $KPKG and closure of: $(echo $GUEST_PKGS)"
"${APT[@]}" install --download-only $GUEST_PKGS >/dev/null
# (apt-get download fetches again even when the file is there: ~70 MB, so only when missing)
ls "$CACHE/debs/${KPKG}_"*.deb >/dev/null 2>&1 ||
  (cd "$CACHE/debs" && apt-get -q -o APT::Sandbox::User=root download "$KPKG" >/dev/null)
# list of .debs in the closure (what apt would install on an empty system)
mapfile -t CLOSURE < <("${APT[@]}" -s install $GUEST_PKGS | awk '/^Inst /{print $2}')
t1=$(date +%s.%N)

# --- 2. unpack user space ------------------------------------------------------
rm -rf "$BUILD"; mkdir -p "$ROOT" "$OUT"
: > "$BUILD/manifest.txt"
for p in "${CLOSURE[@]}"; do
  deb=$(ls "$CACHE/debs/${p}_"*.deb 2>/dev/null | sort -V | tail -1)
  [[ -n $deb ]] || { log "missing .deb for $p"; exit 1; }
  dpkg-deb -x "$deb" "$ROOT"
  dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >> "$BUILD/manifest.txt"
done
# prune things a headless peer never needs
rm -rf "$ROOT"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion,common-licenses} \
       "$ROOT"/usr/lib/x86_64-linux-gnu/gconv "$ROOT"/usr/lib/systemd "$ROOT"/lib/systemd \
       "$ROOT"/etc/systemd "$ROOT"/etc/init.d "$ROOT"/usr/share/perl5 2>/dev/null || true

# busybox applets go into /bb (last in PATH) so real Debian binaries always win
mkdir -p "$ROOT/bb"
chroot "$ROOT" /bin/busybox --install -s /bb
ln -sf dash "$ROOT/bin/sh"             # dash, not busybox ash: Debian's busybox-static
                                        # runs its own applets (ip, tc) before PATH
ln -sf bin/busybox "$ROOT/init"          # busybox init (reaps zombies, reads /etc/inittab)
mkdir -p "$ROOT"/{proc,sys,dev,run,tmp,root,var/log,etc/rxe}

# --- 3. kernel + the few modules rxe needs -------------------------------------
KT=$BUILD/kernel; mkdir -p "$KT"
dpkg-deb -x "$(ls "$CACHE/debs/${KPKG}_"*.deb | sort -V | tail -1)" "$KT"
dpkg-deb --show --showformat='${Package} ${Version}\n' "$(ls "$CACHE/debs/${KPKG}_"*.deb | sort -V | tail -1)" >> "$BUILD/manifest.txt"
KVER=$(ls "$KT/lib/modules")
depmod -b "$KT" "$KVER"
mods=()
for m in $GUEST_MODULES; do
  while read -r kind path _; do [[ $kind == insmod ]] && mods+=("$path"); done \
    < <(modprobe -d "$KT" -S "$KVER" --show-depends "$m")
done
for f in $(printf '%s\n' "${mods[@]}" | sort -u); do
  rel=${f#$KT}; mkdir -p "$ROOT$(dirname "$rel")"; cp "$f" "$ROOT$rel"
done
cp "$KT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$ROOT/lib/modules/$KVER/"
depmod -b "$ROOT" "$KVER"
cp "$KT/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
log "kernel $KVER, $(printf '%s\n' "${mods[@]}" | sort -u | wc -l) modules"
rm -rf "$KT"                             # ~400 MB of unused modules

# --- 4. guest configuration ----------------------------------------------------
cat > "$ROOT/etc/inittab" <<'TAB'
::sysinit:/etc/rxe/rc.sysinit
::respawn:/etc/rxe/agent
::shutdown:/bb/umount -a -r
TAB
echo 'root:x:0:0:root:/root:/bin/sh' > "$ROOT/etc/passwd"
echo 'root:x:0:'                     > "$ROOT/etc/group"
printf '127.0.0.1 localhost\n'       > "$ROOT/etc/hosts"
cat > "$ROOT/etc/profile" <<'PROF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/bb
PROF

# rc.sysinit: bring up the NICs and the rxe device, then announce readiness.
# Parameters come from the kernel command line:
#   rxe.name=NAME rxe.ip=A.B.C.D/NN rxe.mac=MAC (data NIC) rxe.ctlmac=MAC (control NIC)
#   rxe.mtu=1500 (netdev MTU; rxe derives the IB MTU from it)
cat > "$ROOT/etc/rxe/rc.sysinit" <<'RC'
#!/bin/sh
. /etc/profile
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts; mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run
stamp() { read up _ < /proc/uptime; echo "$up $*" >> /run/rxe-boot-stamps; }
stamp sysinit-start
NAME=rxepeer IP=; IP6=; MAC=; CTLMAC=; MTU=1500
for a in $(cat /proc/cmdline); do
  case $a in
    rxe.name=*) NAME=${a#*=};;  rxe.ip=*) IP=${a#*=};;  rxe.mac=*) MAC=${a#*=};; rxe.ip6=*) IP6=${a#*=};;
    rxe.ctlmac=*) CTLMAC=${a#*=};; rxe.mtu=*) MTU=${a#*=};;
  esac
done
hostname "$NAME"
stamp modprobe-start
for m in virtio_pci virtio_net crc32_pclmul crc32_generic rdma_rxe ib_uverbs ib_umad rdma_ucm; do
  modprobe $m 2>/dev/null || echo "rxe-init: modprobe $m failed"
done
stamp modprobe-done
ip link set lo up
# name the NICs by MAC: eth0 = RoCE data link, ctl0 = control link (QEMU user net)
i=0; while [ $i -lt 50 ] && [ $(ls /sys/class/net | wc -l) -lt 3 ]; do sleep 0.1; i=$((i+1)); done
for d in /sys/class/net/*; do
  n=${d##*/}; a=$(cat $d/address)
  [ "$a" = "$CTLMAC" ] && ip link set "$n" name ctl0
done
for d in /sys/class/net/*; do
  n=${d##*/}; a=$(cat $d/address)
  [ "$a" = "$MAC" ] && [ "$n" != eth0 ] && ip link set "$n" name eth0
done
ip link set ctl0 up && ip addr add 10.0.2.15/24 dev ctl0      # QEMU user net (restrict=on)
# announce our MAC to QEMU's slirp: otherwise its first SYN towards the agent is
# dropped waiting for ARP and the first control connection stalls for seconds
arping -q -c 1 -w 1 -I ctl0 10.0.2.2 &
ip link set eth0 mtu "$MTU" up && ip addr add "$IP" dev eth0
# nodad: the address (and so its RoCE GID) is usable at once
[ -n "$IP6" ] && ip -6 addr add "$IP6" dev eth0 nodad
stamp rdma-link-add
rdma link add rxe0 type rxe netdev eth0
i=0; while [ $i -lt 100 ]; do
  ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE && break; sleep 0.1; i=$((i+1))
done
stamp port-active
{
  echo "RXE-PEER-READY name=$NAME ip=$IP mac=$(cat /sys/class/net/eth0/address) uptime=$(cut -d' ' -f1 /proc/uptime)"
  ibv_devinfo -d rxe0 | grep -E 'state|active_mtu|phys_state'
  # (the GID table has 1024 entries: one grep, not a fork per entry - forks are slow under TCG)
  cd /sys/class/infiniband/rxe0/ports/1/gids
  for n in $(grep -L '^0000:0000:0000:0000:0000:0000:0000:0000$' * | sort -n); do
    echo "GID[$n] $(cat $n) $(cat ../gid_attrs/types/$n 2>/dev/null)"
  done
  cd /
} > /run/rxe-ready 2>&1
cat /run/rxe-ready > /dev/console
RC

# agent: tiny command server on the control NIC.  One connection = one command
# line, run by /bin/sh; output (stdout+stderr) streams back, last line __RC__=N.
cat > "$ROOT/etc/rxe/agent" <<'AG'
#!/bin/sh
. /etc/profile
while [ ! -e /run/rxe-ready ]; do sleep 0.2; done
# -t 0.5: once the handler has exited, flush for <=0.5 s and close.  The host side
# (peer-exec.sh) never half-closes its end: socat 1.7.4 otherwise enters its
# closing phase at once and can hang when the command left a setsid'd child.
exec socat -t 0.5 TCP-LISTEN:7777,bind=10.0.2.15,reuseaddr,fork EXEC:/etc/rxe/agent-handler
AG
cat > "$ROOT/etc/rxe/agent-handler" <<'AH'
#!/bin/sh
. /etc/profile
IFS= read -r cmd || exit 0
# socat leaks its own sockets (fds 3..9) into the child: close them, or any
# background process started by the command keeps the connection open forever
exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
cd /root
/bin/sh -c "$cmd" </dev/null 2>&1
echo "__RC__=$?"
AH
# bgrun LOG CMD...: start a long-running command detached from the agent connection
mkdir -p "$ROOT/usr/local/bin"
cat > "$ROOT/usr/local/bin/bgrun" <<'BG'
#!/bin/sh
# bgrun LOGFILE CMD [ARGS...] - run CMD detached, print its PID
log=$1; shift
setsid "$@" </dev/null >"$log" 2>&1 &
echo $!
BG
chmod +x "$ROOT"/etc/rxe/* "$ROOT/usr/local/bin/bgrun"

# dynamic linker cache (packages install into both /lib and /usr/lib multiarch dirs)
ldconfig -r "$ROOT"

# --- 5. pack -------------------------------------------------------------------
(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$OUT/initrd.img"
cp "$BUILD/manifest.txt" "$OUT/manifest.txt"
echo "$SELF_HASH" > "$OUT/script.sha256"
t2=$(date +%s.%N)
log "done: $(du -h "$OUT/initrd.img" | cut -f1) initramfs ($(du -sh "$ROOT" | cut -f1) tree), kernel $KVER"
printf 'download %.1fs, assemble %.1fs, total %.1fs\n' \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$(echo "$t2 - $t0" | bc)" | tee "$OUT/build-time.txt"
rm -rf "$BUILD"                          # the unpacked tree is no longer needed
