#!/bin/bash
# vs-rxe.sh URXE PROVIDER - urxe next to the kernel's Soft-RoCE (rdma_rxe), in the same two guests, one boot.
# (tools/perf-report --vs-rxe builds urxe and calls this.)
#
#   1. builds the guest if needed (build-guest.sh) and packs urxe for it (urxe-cpio.sh), boots peers 1 and 2
#      with that archive added (start-peer.sh, EXTRA_INITRD);
#   2. rxe half: the perftest matrix over rxe0, server in guest 1, client in guest 2;
#   3. in both guests: `rdma link delete rxe0` and the kernel's RDMA modules unloaded (with ib_core loaded,
#      libibverbs lists the kernel's devices only and would never see urxe's), then
#      `urxe link add urxe0 netdev eth0 --port socket`, which, as on a host, drops UDP 4791 at eth0's ingress
#      with nftables (hostnet/kernel_guard.h): the kernel's IP and UDP never see RoCE and send no ICMP;
#   4. urxe half: the same matrix over urxe0 (`urxe run -- perftest ...`);
#   5. steps 2-4 again, URXE_VS_RXE_ROUNDS times in all (default 2): before each further rxe half, urxe0
#      deleted, the modules loaded and rxe0 made again;
#   6. prints per row each stack's median over the rounds (and range), urxe/rxe of the medians and of each
#      round, plus the guests' ICMP port-unreachable and UDP counters for each half (only one stack answers
#      RoCE at a time, and no ICMP storm).
# Matrix: ib_send_lat and ib_write_lat 64 B (typical and average us), ib_write_bw 64 B (Mpps) and 64 KiB,
# ib_read_bw 64 KiB (MB/s).
#
# The peers get their own run directory and network namespace (RUN_DIR=$STATE/run-vs-rxe,
# NETNS=urxe-vsrxe), so peers 1 and 2 of the interop tests (namespace urxe-rxenet) are not touched; all
# of it is stopped and removed on exit. Both stacks run under the same emulator (TCG unless the host has a
# hardware KVM module, see rxe-env.sh), so the ratio is the figure that counts, not the absolute values.
# Every run is bounded by iterations (-n; under TCG perftest's -D reported 0 messages/s for a run that had
# made progress) and by timeout(1), in the guest and around each peer-exec.sh.
# Knobs: URXE_VS_RXE_ITERS (latency iterations, default 2000), URXE_VS_RXE_BW_ITERS (ib_write_bw 64 B, default
# 20000), URXE_VS_RXE_BW64K_ITERS (64 KiB bandwidth, default 500), URXE_VS_RXE_ROUNDS (default 2),
# URXE_VS_RXE_KEEP=1 (keep the outputs),
# SMP/MEM/MTU/ACCEL/BOOT_TIMEOUT (rxe-env.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[[ $# -eq 2 ]] || { echo "usage: $0 URXE PROVIDER" >&2; exit 2; }
urxe=$1 prov=$2
[[ $(id -u) -eq 0 ]] || { echo "vs-rxe: needs root (network namespace, taps)" >&2; exit 1; }
export NETNS=${URXE_VS_RXE_NETNS:-urxe-vsrxe}
. "$HERE/rxe-env.sh"
export RUN_DIR=${URXE_VS_RXE_RUN_DIR:-$STATE/run-vs-rxe}
iters=${URXE_VS_RXE_ITERS:-2000}        # latency tests
bw_small=${URXE_VS_RXE_BW_ITERS:-20000}  # ib_write_bw 64 B
bw_large=${URXE_VS_RXE_BW64K_ITERS:-500} # ib_write_bw and ib_read_bw 64 KiB
rounds=${URXE_VS_RXE_ROUNDS:-2}          # rxe and urxe halves, alternating
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
srv_ip=$(peer_ip 1)

tmp=$(mktemp -d /tmp/urxe-vs-rxe.XXXXXX)
booted=0
client=
cleanup() {
  if [[ -n $client ]]; then kill "$client" 2>/dev/null || true; fi
  if ((booted)); then
    "$HERE/stop-peer.sh" 1 2 --teardown >&2 || true
    rm -f "$RUN_DIR"/peer[12]/initrd.img  # start-peer.sh's concatenation, 50 MB each
  fi
  if [[ ${URXE_VS_RXE_KEEP:-0} == 1 ]]; then echo "outputs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say() { printf '\n== %s\n' "$*"; }
# px N 'commands': peer-exec.sh, bounded; the agent reads one line, so a multi-line script goes base64-encoded
px() { timeout "${PX_TIMEOUT:-60}" "$HERE/peer-exec.sh" "$1" "echo $(printf '%s' "$2" | base64 -w0) | base64 -d | sh"; }

for n in 1 2; do  # start-peer.sh would take a running peer as ready: never share (or stop) another run's
  if peer_pid "$n" >/dev/null; then
    echo "vs-rxe: peer $n of $RUN_DIR is already running (another vs-rxe run?); stop it with" \
      "NETNS=$NETNS RUN_DIR=$RUN_DIR $HERE/stop-peer.sh --all --teardown" >&2
    exit 1
  fi
done
say "guest (build-guest.sh) and urxe for it (urxe-cpio.sh)"
"$HERE/build-guest.sh"
"$HERE/urxe-cpio.sh" "$urxe" "$prov" "$tmp/urxe.cpio"
say "booting peers 1 and 2 (accel=$ACCEL, ${SMP} vCPU, ${MEM} MiB, MTU $MTU)"
booted=1
EXTRA_INITRD=$tmp/urxe.cpio "$HERE/start-peer.sh" 1 2 >"$tmp/boot.log" 2>&1 || {
  cat "$tmp/boot.log" >&2
  echo "vs-rxe: the peers did not come up" >&2
  exit 1
}
grep READY "$tmp/boot.log"
for n in 1 2; do
  px "$n" '. /opt/urxe/env && urxe --version >/dev/null' || { echo "vs-rxe: urxe does not run in peer $n" >&2; exit 1; }
done

# counters N HALF 0|1: the guest's ICMP and UDP counters (/proc/net/snmp) and its kernel RDMA devices and
# modules, into $tmp/HALF.snmpN.{0,1}
counters() {
  px "$1" 'grep -E "^(Icmp|Udp):" /proc/net/snmp
    echo "rdma: devices [ $(ls /sys/class/infiniband 2>/dev/null | tr "\n" " ")] modules [ $(lsmod | awk "/^(ib_core|rdma_rxe) /{printf \"%s \", \$1}")]"' \
    >"$tmp/$2.snmp$1.$3" || true
}

# gid_index N DEV PREFIX: the GID index of DEV in guest N whose GID is its IPv4 address (RoCE v2); PREFIX
# gives urxe's environment (SYSFS_PATH) for urxe0.
gid_index() {
  px "$1" "$3 sh -c 'cd \"\${SYSFS_PATH:-/sys}/class/infiniband/$2/ports/1/gids\" &&
    grep -l \"^0000:0000:0000:0000:0000:ffff:\" * | sort -n | head -1'" | tr -d '\r'
}

# run_pair HALF NAME PREFIX ARGS...: server (guest 1) and client (guest 2) run PREFIX perftest ARGS,
# the client with the server's IP last; outputs in $tmp/HALF.NAME.{server,client}.
run_pair() {
  local half=$1 name=$2 prefix=$3 spid src=0 crc=0
  shift 3
  local args="$* -F"
  px 1 "rm -f /tmp/srv.log /tmp/srv.rc" >/dev/null || true
  spid=$(px 1 "$prefix bgrun /tmp/srv.log sh -c 'timeout 300 $args; echo \$? >/tmp/srv.rc'" | tr -d '\r') || {
    echo "  $half $name: server did not start" >&2
    return 1
  }
  # wait (bounded) until the server listens on perftest's TCP port
  if ! px 1 'i=0; while [ $i -lt 300 ]; do ss -Hltn "sport = :18515" | grep -q . && exit 0; sleep 0.1; i=$((i+1)); done; exit 1' >/dev/null; then
    echo "  $half $name: server not listening" >&2
    px 1 "cat /tmp/srv.log; kill $spid" >&2 || true
    return 1
  fi
  # in the background: a signal's trap runs during `wait`, not only once a foreground command ended
  PX_TIMEOUT=330 px 2 "$prefix timeout 300 $args $srv_ip" >"$tmp/$half.$name.client" 2>&1 &
  client=$!
  wait "$client" || crc=$?
  client=
  # the server ends by itself once the client is done
  px 1 "i=0; while [ \$i -lt 300 ] && [ ! -s /tmp/srv.rc ]; do sleep 0.1; i=\$((i+1)); done
    cat /tmp/srv.log; [ -s /tmp/srv.rc ] || { kill -9 -$spid 2>/dev/null; echo server killed; exit 1; }
    exit \$(cat /tmp/srv.rc)" >"$tmp/$half.$name.server" 2>&1 || src=$?
  if ((crc || src)); then
    echo "  $half $name FAILED (server exit $src, client exit $crc)"
    sed 's/^/    server: /' "$tmp/$half.$name.server" | tail -12
    sed 's/^/    client: /' "$tmp/$half.$name.client" | tail -12
    return 1
  fi
  printf '  %-5s %-14s ok\n' "$half" "$name"
}

# matrix HALF DEV PREFIX: the perftest matrix over DEV (the same GID index on both sides: the IPv4 one).
matrix() {
  local half=$1 dev=$2 prefix=$3 g
  g=$(gid_index 1 "$dev" "$prefix")
  [[ $g =~ ^[0-9]+$ ]] || { echo "vs-rxe: no IPv4 GID on $dev in peer 1" >&2; return 1; }
  [[ $(gid_index 2 "$dev" "$prefix") == "$g" ]] || { echo "vs-rxe: the IPv4 GID index of $dev differs between the peers" >&2; return 1; }
  local c="-d $dev -x $g" f=0
  counters 1 "$half" 0; counters 2 "$half" 0
  run_pair "$half" send_lat_64 "$prefix" ib_send_lat $c -s 64 -n "$iters" || f=1
  run_pair "$half" write_lat_64 "$prefix" ib_write_lat $c -s 64 -n "$iters" || f=1
  run_pair "$half" write_bw_64 "$prefix" ib_write_bw $c -s 64 -n "$bw_small" || f=1
  run_pair "$half" write_bw_64k "$prefix" ib_write_bw $c -s 65536 -n "$bw_large" || f=1
  run_pair "$half" read_bw_64k "$prefix" ib_read_bw $c -s 65536 -n "$bw_large" || f=1
  counters 1 "$half" 1; counters 2 "$half" 1
  return $f
}

# to_urxe N: in guest N, rxe0 deleted and the kernel's RDMA modules unloaded and kept from loading again
# (libibverbs and urxe open a NETLINK_RDMA socket, which would load ib_core again: its alias
# net-pf-16-proto-20), then urxe0 made.
to_urxe() {
  px "$1" 'rdma link delete rxe0
    mkdir -p /etc/modprobe.d && echo "install ib_core /bin/false" >/etc/modprobe.d/vs-rxe-no-ib_core.conf
    for m in rdma_ucm rdma_cm ib_umad rdma_rxe ib_uverbs iw_cm ib_cm ib_core; do
      if [ -e /sys/module/$m/refcnt ]; then rmmod $m 2>&1 || break; fi
    done
    if [ -d /sys/module/ib_core ]; then echo "ib_core still loaded:"; lsmod | grep -E "^(ib|rdma|iw)_"; exit 1; fi
    modprobe nf_tables && . /opt/urxe/env && urxe link add urxe0 netdev eth0 --port socket' >"$tmp/switch$1.log" 2>&1 &&
    px "$1" 'ls /sys/class/infiniband 2>/dev/null | grep -q . && exit 1; exit 0' || {
    cat "$tmp/switch$1.log" >&2
    echo "vs-rxe: switching peer $1 to urxe failed" >&2
    return 1
  }
  sed "s/^/  peer$1: /" "$tmp/switch$1.log"
}
# to_rxe N: in guest N, urxe0 deleted (its /dev/infiniband node would take the name the kernel's uverbs
# device needs, and its nftables drop of UDP 4791 would starve rxe: checked gone), the modules loaded again
# as the guest's init does and rxe0 made again; a bounded wait for its port to be ACTIVE.
to_rxe() {
  px "$1" '. /opt/urxe/env && urxe link del urxe0 || exit 1
    if nft list tables | grep -q urxe; then echo "urxe nftables table left:"; nft list tables; exit 1; fi
    rm -f /etc/modprobe.d/vs-rxe-no-ib_core.conf
    for m in rdma_rxe ib_uverbs ib_umad rdma_ucm; do modprobe $m || exit 1; done
    rdma link add rxe0 type rxe netdev eth0 || exit 1
    i=0; while [ $i -lt 100 ]; do
      ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE && exit 0; sleep 0.1; i=$((i+1))
    done; echo "rxe0 not ACTIVE"; ls -l /dev/infiniband; ibv_devinfo -d rxe0; exit 1' >"$tmp/switch$1.log" 2>&1 || {
    cat "$tmp/switch$1.log" >&2
    echo "vs-rxe: switching peer $1 back to rxe failed" >&2
    return 1
  }
}

# The halves alternate, rxe then urxe, URXE_VS_RXE_ROUNDS times (default 2) in the same boot: under TCG on a
# shared host the guests' speed moves by up to 2x within a boot (the host places four busy threads, each
# guest's vCPU and its QEMU main loop, on the cores it has), and one rxe half followed by one urxe half put
# whichever state came in each half into the ratio (ib_send_lat urxe/rxe 0.99 in one run, 2.26 in another).
load_before=$(uptime)
fail=0
for ((r = 1; r <= rounds; r++)); do
  if ((r > 1)); then
    say "round $r: back to kernel rxe in both guests"
    to_rxe 1 && to_rxe 2 || exit 1
  fi
  say "round $r, rxe half: kernel rdma_rxe (rxe0) in both guests"
  matrix rxe.$r rxe0 "" || fail=1
  say "round $r: both guests to urxe (rxe0 deleted, kernel RDMA modules unloaded)"
  to_urxe 1 && to_urxe 2 || exit 1
  say "round $r, urxe half: urxe0 (--port socket) in both guests"
  matrix urxe.$r urxe0 '. /opt/urxe/env && urxe run --' || fail=1
done
load_after=$(uptime)

"$py" - "$tmp" "$rounds" <<'EOF'
import re, sys
tmp = sys.argv[1]

def text(name):
    try:
        return open(f"{tmp}/{name}").read()
    except OSError:
        return ""

def bw(half, name, size):  # perftest bandwidth row: #bytes #iterations peak avg[MB/s] MsgRate[Mpps]
    for line in text(f"{half}.{name}.client").splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == str(size):
            mbs = float(f[3])
            mpps = float(re.match(r"[0-9.]+", f[4]).group())
            return mpps, mpps * size * 8 / 1000, mbs  # Mpps, Gbit/s (10^9), MB/s (perftest's 2^20)
    return None

def lat(half, name, size):  # perftest latency row: #bytes #iter t_min t_max t_typical t_avg ...
    for line in text(f"{half}.{name}.client").splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == str(size):
            return float(f[4]), float(f[5])
    return None

rounds = int(sys.argv[2])

def med(v):
    v = sorted(v)
    return None if not v else (v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2)

def cell(v, fmt):  # median over the rounds, and their range
    if not v:
        return "n/a"
    return fmt(med(v)) + ("" if len(v) < 2 else f" ({fmt(min(v)).split()[0]}-{fmt(max(v)).split()[0]})")

# Each row: the median of each stack over the rounds (and the range), urxe/rxe of the medians, and
# urxe/rxe per round (the two halves of a round ran next to each other).
rows = []
def row(label, get, fmt):
    rv = [get("rxe", r) for r in range(1, rounds + 1)]
    uv = [get("urxe", r) for r in range(1, rounds + 1)]
    rm, um = med([x for x in rv if x is not None]), med([x for x in uv if x is not None])
    per = " ".join("n/a" if x is None or y is None or not x else f"{y / x:.2f}" for x, y in zip(rv, uv))
    rows.append((label, cell([x for x in rv if x is not None], fmt), cell([x for x in uv if x is not None], fmt),
                 "n/a" if rm is None or um is None or not rm else f"{um / rm:.2f}", per))

def pick(f, i):
    return lambda half, r: (lambda v: None if v is None else v[i])(f(f"{half}.{r}"))
for name, app, size in (("send_lat_64", "ib_send_lat", 64), ("write_lat_64", "ib_write_lat", 64)):
    for i, kind in ((0, "typical"), (1, "average")):
        row(f"{app} 64 B {kind}", pick(lambda h, name=name, size=size: lat(h, name, size), i), lambda x: f"{x:.1f} us")
row("ib_write_bw 64 B", pick(lambda h: bw(h, "write_bw_64", 64), 0), lambda x: f"{x:.4f} Mpps")
for name, app in (("write_bw_64k", "ib_write_bw"), ("read_bw_64k", "ib_read_bw")):
    row(f"{app} 64 KiB", pick(lambda h, name=name: bw(h, name, 65536), 2), lambda x: f"{x:.1f} MB/s")
hdr = ("", "kernel rxe (rxe0)", "urxe (urxe0, socket port)", "urxe/rxe", "per round")
w = [max(len(x[i]) for x in rows + [hdr]) for i in range(5)]
line = lambda x: "  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(x)).rstrip()
print()
print(line(hdr))
print("  " + "-" * (sum(w) + 8))
for x in rows:
    print(line(x))
print(f"  each stack: the median of {rounds} rounds (their range); urxe/rxe of the medians, then of each round's")
print("  two halves. Latency: lower is better (ratio > 1: urxe slower); bandwidth: higher is better (ratio < 1:")
print("  urxe slower). MB/s as perftest prints them (2^20 bytes).")

def snmp(half, n, when):
    t = [l for l in text(f"{half}.snmp{n}.{when}").splitlines() if not l.startswith("rdma:")]
    out = {}
    for i in range(0, len(t) - 1, 2):
        k, v = t[i].split(), t[i + 1].split()
        if k and v and k[0] == v[0]:
            for a, b in zip(k[1:], v[1:]):
                out[k[0].rstrip(":") + a] = int(b)
    return out
print()
for half in [f"{h}.{r}" for r in range(1, rounds + 1) for h in ("rxe", "urxe")]:
    for n in (1, 2):
        a, b = snmp(half, n, 0), snmp(half, n, 1)
        d = lambda k: b.get(k, 0) - a.get(k, 0) if k in a and k in b else "n/a"
        print(f"  {half:6} half, guest {n}: ICMP port unreachable sent {d('IcmpOutDestUnreachs')}, "
              f"UDP datagrams to no port {d('UdpNoPorts')}, UDP in errors {d('UdpInErrors')}")
        for when in (0, 1):
            m = re.search(r"^rdma: (.*)$", text(f"{half}.snmp{n}.{when}"), re.M)
            print(f"    kernel RDMA {('before', 'after')[when]}: {m.group(1).strip() if m else 'n/a'}")
print("  (urxe half: `urxe link add` drops UDP 4791 at eth0's ingress with nftables, hostnet/kernel_guard.h, so")
print("  RoCE datagrams never reach the kernel's UDP and it sends no ICMP; rxe0 and ib_core are gone by then)")
EOF
echo
echo "  guests: $(grep -o 'accel=[a-z]*' "$tmp/boot.log" | head -1), $SMP vCPU and $MEM MiB each, MTU $MTU; iterations: latency $iters, 64 B bandwidth $bw_small, 64 KiB bandwidth $bw_large"
echo "  load before: ${load_before#*load}"
echo "  load after:  ${load_after#*load}"
echo "  cores: $(nproc)"
exit $fail
