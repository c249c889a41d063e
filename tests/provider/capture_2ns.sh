#!/bin/sh
# Live capture and logs between two network namespaces (veth), urxe0 on each side over the default port.
#   capture: side A captures through the device config (`link add --pcap DIR`), side B through URXE_PCAP for
#     one run. After an RC and a UD pingpong, each side's pcapng opens in tshark; RoCE frames per direction
#     match the other side's opposite direction; `urxe pcap decode --strict` verifies every ICRC; every RoCE
#     frame's comment names the process (pid from the file name, comm) and the BTH DestQP of that frame
#     (and the DETH SrcQP for UD); the section comment names device, interface and pid.
#   rotation: an ib_write_bw of ~40 MB with --pcap-size 1 --pcap-files 3: at most 3 files, each <= 1 MiB,
#     numbered past 3 (older ones were deleted), each one readable and ICRC-clean.
#   logs: the runs above print no urxe log line at the default level; a client whose server was killed
#     prints one error line naming its QP and "retry exhausted", and not one line per packet.
#   usage: capture_2ns.sh URXE PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v tshark >/dev/null || { echo "SKIP: tshark not installed"; exit 77; }
urxe=$1; so=$2
mkdir -p /dev/infiniband
a=urxecapA$$; b=urxecapB$$
netns_tmpdir tmp urxe-capture || exit 1
netns_pair $a $b va vb 10.91.0.1/24 10.91.0.2/24 || exit 1

fail=0
bad() { echo "FAIL: $*"; fail=1; }

side() {  # side NS IFACE OUTFILE "LINK ADD OPTIONS" CMD...   (extra environment through `env` in CMD)
  _sd_ns=$1 _sd_if=$2 _sd_out=$3 _sd_opts=$4
  shift 4
  netns_urxe_side "$_sd_ns" "$_sd_if" "$_sd_out" "$urxe" "$so" "$_sd_opts" "$@"
}

pair() {  # pair NAME "A OPTIONS" "B ENV" APP ARGS...: server on A, client on B; both must succeed
  name=$1; aopts=$2; benv=$3; shift 3
  side $a va "$tmp/$name.server" "$aopts" "$@" &
  srv=$!
  netns_wait_listen $srv $a  # the server listens on TCP 18515 (ibverbs-utils, perftest)
  # shellcheck disable=SC2086
  side $b vb "$tmp/$name.client" "" env $benv "$@" 10.91.0.1
  crc=$?
  wait $srv
  src=$?
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    bad "$name: $* (server rc $src, client rc $crc)"
    sed 's/^/  server: /' "$tmp/$name.server"
    sed 's/^/  client: /' "$tmp/$name.client"
    return 1
  fi
  # A normal run logs nothing at the default level (the port's one-line notice is not a log line).
  if grep -E '^urxe: (error|warn|info|debug):' "$tmp/$name.server" "$tmp/$name.client"; then
    bad "$name: a normal run printed log lines at the default level"
  fi
  return 0
}

# Count of RoCE frames in FILE with direction DIR (1 inbound, 2 outbound).
count_dir() {
  tshark -r "$1" -Y "udp.dstport == 4791 && frame.packet_flags_direction == $2" -T fields -e frame.number \
    2>/dev/null | wc -l
}

# Checks one side's capture directory against the other's: files, directions, ICRC, comments.
check_pair() {  # check_pair NAME DIR_A DIR_B COMM
  name=$1; da=$2; db=$3; comm=$4
  fa=$(ls "$da"/*.pcapng 2>/dev/null); fb=$(ls "$db"/*.pcapng 2>/dev/null)
  [ "$(echo "$fa" | grep -c .)" = 1 ] || { bad "$name: expected one file in $da, got: $fa"; return; }
  [ "$(echo "$fb" | grep -c .)" = 1 ] || { bad "$name: expected one file in $db, got: $fb"; return; }
  for f in "$fa" "$fb"; do
    tshark -r "$f" -c 1 >/dev/null 2>"$tmp/tshark.err" || { bad "$name: tshark cannot read $f"; cat "$tmp/tshark.err"; }
    "$urxe" pcap decode --strict "$f" >/dev/null 2>"$tmp/decode.err" ||
      { bad "$name: urxe pcap decode --strict $f"; cat "$tmp/decode.err"; }
  done
  a_in=$(count_dir "$fa" 1); a_out=$(count_dir "$fa" 2); b_in=$(count_dir "$fb" 1); b_out=$(count_dir "$fb" 2)
  echo "$name: A in $a_in out $a_out, B in $b_in out $b_out"
  [ "$a_out" -gt 100 ] || bad "$name: only $a_out frames sent by A"
  [ "$a_out" = "$b_in" ] || bad "$name: A sent $a_out RoCE frames, B received $b_in"
  [ "$b_out" = "$a_in" ] || bad "$name: B sent $b_out RoCE frames, A received $a_in"
  for f in "$fa" "$fb"; do
    pid=$(basename "$f" | cut -d_ -f2)
    # Every RoCE frame: comment "pid PID (COMM) in|out, to QP 0xDQPN[, from QP 0xSQPN]" with DQPN = BTH DestQP.
    tshark -r "$f" -Y "udp.dstport == 4791" -T fields -E separator=';' -e frame.packet_flags_direction \
      -e infiniband.bth.destqp -e infiniband.deth.srcqp -e frame.comment 2>/dev/null >"$tmp/fields"
    n=$(awk -F';' -v pid="$pid" -v comm="$comm" '
      function num(s,   v, i, c) {  # tshark prints QPNs as 0x-hex or decimal; mawk has no strtonum
        if (s !~ /^0x/) return s + 0
        v = 0
        for (i = 3; i <= length(s); i++) { c = index("0123456789abcdef", tolower(substr(s, i, 1))); v = v * 16 + c - 1 }
        return v
      }
      { dir = $1 == 1 ? "in" : "out"
        want = sprintf("pid %s (%s) %s, to QP 0x%06x", pid, comm, dir, num($2))
        if ($3 != "") want = want sprintf(", from QP 0x%06x", num($3))
        if ($4 != want) { if (bad++ < 3) print "  got \"" $4 "\" want \"" want "\"" > "/dev/stderr" } }
      END { print bad + 0 }' "$tmp/fields")
    [ "$n" = 0 ] || bad "$name: $n frames of $f without the expected comment"
    capinfos "$f" 2>/dev/null | grep -q "urxe capture of device urxe0 on interface v[ab], pid $pid ($comm)" ||
      bad "$name: $f: section comment does not name device, interface and pid"
  done
}

# 1. RC and UD pingpong, A by device config, B by environment.
for t in rc ud; do
  mkdir -p "$tmp/$t.a" "$tmp/$t.b"
  pair $t "--pcap $tmp/$t.a" "URXE_PCAP=$tmp/$t.b" ibv_${t}_pingpong -d urxe0 -g 1 -n 200 &&
    check_pair $t "$tmp/$t.a" "$tmp/$t.b" ibv_${t}_pingpong
done

# 2. Rotation: ~40 MB written by B into A, A captures in 1 MB files, 3 kept.
mkdir -p "$tmp/ring"
if pair ring "--pcap $tmp/ring --pcap-size 1 --pcap-files 3" "" ib_write_bw -d urxe0 -x 1 -s 65536 -n 600; then
  files=$(ls "$tmp/ring"/*.pcapng)
  echo "ring: $(ls -l "$tmp/ring" | awk 'NR > 1 { print $5, $9 }' | tr '\n' ' ')"
  [ "$(echo "$files" | grep -c .)" -le 3 ] || bad "ring: more than 3 files kept"
  last=$(echo "$files" | tail -1 | sed 's/.*_\([0-9]\{5\}\)_[0-9]*\.pcapng$/\1/')
  [ "$(expr "$last" + 0)" -gt 3 ] || bad "ring: newest file is number $last: no rotation happened"
  for f in $files; do
    sz=$(stat -c %s "$f")
    [ "$sz" -le 1048576 ] || bad "ring: $f is $sz bytes (> 1 MiB)"
    "$urxe" pcap decode --strict "$f" >/dev/null 2>&1 || bad "ring: urxe pcap decode --strict $f"
  done
fi

# 3. A client whose server vanished: an ib_write_bw client always has WRITEs in flight, so once the server is
#    killed its QP must fail with retry exhausted, logged once at the default level. Traffic is known to
#    flow when the client's own capture (URXE_PCAP) has grown past 64 KB.
mkdir -p "$tmp/dead.b"
side $a va "$tmp/dead.server" "" ib_write_bw -d urxe0 -x 1 -D 30 &
srv=$!
netns_wait_listen $srv $a || bad "dead peer: the server does not listen on TCP 18515"
side $b vb "$tmp/dead.client" "" env URXE_PCAP="$tmp/dead.b" ib_write_bw -d urxe0 -x 1 -D 30 10.91.0.1 &
cli=$!
i=0
while [ "$(cat "$tmp/dead.b"/*.pcapng 2>/dev/null | wc -c)" -lt 65536 ] && [ $i -lt 200 ]; do
  sleep 0.1
  i=$((i + 1))
done
for p in $(ip netns pids $a); do kill -9 "$p" 2>/dev/null; done
wait $srv
wait $cli
crc=$?
[ $crc -ne 0 ] || bad "dead peer: the client exited 0"
grep -E '^urxe: error: urxe0: QP 0x[0-9a-f]{6} \(RC\) to error.*retry exhausted' "$tmp/dead.client" ||
  { bad "dead peer: no 'QP to error: retry exhausted' log line"; sed 's/^/  client: /' "$tmp/dead.client"; }
nlines=$(grep -c '^urxe: ' "$tmp/dead.client")
[ "$nlines" -le 5 ] || bad "dead peer: $nlines urxe lines (one per packet?)"
exit $fail
