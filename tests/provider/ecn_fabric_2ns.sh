#!/bin/sh
# DCQCN live: two urxe namespaces joined through a third that stands for the switch (a bridge; netns_fabric),
# whose output ports towards both hosts mark ECN-capable RoCE frames CE beyond a rate, as a switch's queue
# marks once the traffic exceeds what its port drains: a token bucket standing in for the queue (this kernel
# has no ECN-marking qdisc, and a qdisc on a host's own veth never sees urxe's frames, which the port sends
# past the qdisc). nftables marks at the netdev egress hook of the bridge ports:
#   udp dport 4791 ip ecn { ect0, ect1 } limit rate over RATE ip ecn set ce
# For each app (server in A, client in B), run twice: unmarked, then with marking at a quarter of the
# unmarked throughput. Checks of the marked run: both sides exit 0 and no retry was exhausted; the fabric
# marked frames; the receiving side counted them (np_ecn_marked_roce_packets) and answered with CNPs
# (np_cnp_sent); the sending side cut its rate on them (rp_cnp_handled); and the throughput came down to at
# most URXE_ECN_MAX_RATIO (default 2) x the marking rate; with several QPs, they share it fairly (Jain index
# >= 0.8 over the bytes each QP sent in one second of the run, read from `urxe stats -p --json`).
#   usage: ecn_fabric_2ns.sh URXE PROVIDER_SO "APP ARGS" ["APP ARGS" ...]
#   (perftest bandwidth apps: the client gets the server's address appended; veth MTU $URXE_TEST_MTU)
#   URXE_ECN_CC_PARAMS="name=value ...": cc_params for both sides (e.g. rp_enable=0: the checks must fail)
# The receiver's own congestion signal (a deep receive ring answered as CE, np_rx_ring_mark_enable) is off:
# on a busy host it can hold the sender below the fabric's marking rate, and then the fabric marks nothing
# and the run says nothing about the reaction to CE. Its own test is tests/engine/congestion_test.cc.
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v nft >/dev/null || { echo "SKIP: nft (nftables) not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
urxe=$1; so=$2; shift 2
max_ratio=${URXE_ECN_MAX_RATIO:-2}
mkdir -p /dev/infiniband
a=uecA$$; b=uecB$$; f=uecF$$
netns_tmpdir tmp urxe-ecn || exit 1
netns_fabric $a $b $f va vb 10.93.0.1/24 10.93.0.2/24 || { echo "FAIL: setting up the namespaces"; exit 1; }

mark_on() {  # mark_on RATE_MB: CE-mark beyond RATE_MB MB/s on both output ports
  ip netns exec $f nft -f - <<NFT
table netdev cp_a {
  chain out { type filter hook egress device "fa" priority 0;
    udp dport 4791 ip ecn { ect0, ect1 } limit rate over $1 mbytes/second burst 256 kbytes ip ecn set ce counter; }
}
table netdev cp_b {
  chain out { type filter hook egress device "fb" priority 0;
    udp dport 4791 ip ecn { ect0, ect1 } limit rate over $1 mbytes/second burst 256 kbytes ip ecn set ce counter; }
}
NFT
}
mark_off() {
  ip netns exec $f nft delete table netdev cp_a 2>/dev/null
  ip netns exec $f nft delete table netdev cp_b 2>/dev/null
}
marked() { ip netns exec $f nft list table netdev "$1" | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'; }

# run NAME APP...: server in A, client in B, each with its run directory $tmp/NAME.{a,b} kept for `urxe
# stats`; sets rc (0 when both exited 0), bw (the client's average MB/s) and jain (fairness of the bytes
# the client's QPs sent between 3 and 4 s after its start).
run() {
  _name=$1
  shift
  for _s in a b; do  # the device first, for its cc_params
    netns_urxe_side_in "$tmp/$_name.$_s" "$(eval echo \$$_s)" v$_s "$tmp/$_name.$_s.out" "$urxe" "$so" "" true ||
      { echo "FAIL: urxe0 on v$_s"; rc=1; return; }
    for _kv in np_rx_ring_mark_enable=0 ${URXE_ECN_CC_PARAMS:-}; do
      echo "${_kv#*=}" >"$tmp/$_name.$_s/sys/class/infiniband/urxe0/cc_params/${_kv%%=*}"
    done
  done
  netns_urxe_side_in "$tmp/$_name.a" $a va "$tmp/$_name.server" "$urxe" "$so" "" "$@" &
  _srv=$!
  netns_wait_listen $_srv $a
  netns_urxe_side_in "$tmp/$_name.b" $b vb "$tmp/$_name.client" "$urxe" "$so" "" "$@" 10.93.0.1 &
  _cli=$!
  # Not waits for a condition: the fairness window is one second (its length is the measure) starting 3 s
  # into the client's run, once DCQCN had time to settle the QPs' rates (a time, not an event to poll for).
  sleep 3
  qp_bytes "$tmp/$_name.b" >"$tmp/$_name.s1"
  sleep 1
  qp_bytes "$tmp/$_name.b" >"$tmp/$_name.s2"
  wait $_cli
  _crc=$?
  jain=$(awk 'NR == FNR { s[$1] = $2; next } ($1 in s) { x = $2 - s[$1]; n++; t += x; q += x * x }
              END { if (n > 0 && q > 0) printf "%.3f", t * t / (n * q); else print "n/a" }' \
             "$tmp/$_name.s1" "$tmp/$_name.s2")
  wait $_srv
  _src=$?
  rc=$((_crc | _src))
  bw=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { v = $4 } END { print v + 0 }' "$tmp/$_name.client")
  if [ $rc -ne 0 ]; then
    echo "FAIL: $* (server rc $_src, client rc $_crc)"
    sed 's/^/  server: /' "$tmp/$_name.server" | tail -20
    sed 's/^/  client: /' "$tmp/$_name.client" | tail -20
  fi
}
qp_bytes() {  # qp_bytes RUN_DIR: "QPN SENT_BYTES" per live RC QP of the device's processes
  URXE_RUN_DIR=$1 "$urxe" stats urxe0 -p --json 2>/dev/null |
    jq -r '.processes[] | select(.alive) | .qps[] | select(.type == "RC") | "\(.qpn) \(.counters.sent_bytes // 0)"'
}
ctr() {  # ctr NAME SIDE COUNTER: the device total after the run
  URXE_RUN_DIR=$tmp/$1.$2 "$urxe" stats urxe0 --json | jq ".counters.$3"
}
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

fail=0
n=0
for app in "$@"; do
  n=$((n + 1))
  mark_off
  # shellcheck disable=SC2086
  run plain$n $app
  [ $rc -eq 0 ] || { fail=1; continue; }
  gt "$bw" 0 || { echo "FAIL: $app: no throughput figure in the unmarked run's output"; fail=1; continue; }
  bw0=$bw
  rate=$(awk -v b="$bw0" 'BEGIN { r = int(b / 4); print (r < 10 ? 10 : r) }')
  mark_on "$rate" || { echo "FAIL: nft would not take the marking rules"; exit 1; }
  # shellcheck disable=SC2086
  run ecn$n $app
  ma=$(marked cp_a); mb=$(marked cp_b)
  mark_off
  [ $rc -eq 0 ] || { fail=1; continue; }
  # Which side receives the marked data: READ's responses flow from the server (A) to the client (B).
  case $app in
    ib_read*) np=b rp=a; m=$mb ;;
    *) np=a rp=b; m=$ma ;;
  esac
  ecn=$(ctr ecn$n $np np_ecn_marked_roce_packets)
  cnp=$(ctr ecn$n $np np_cnp_sent)
  handled=$(ctr ecn$n $rp rp_cnp_handled)
  backlog=$(ctr ecn$n $np np_rx_backlog_marked)
  retry=$(( $(ctr ecn$n a retry_exceeded_err) + $(ctr ecn$n b retry_exceeded_err) ))
  echo "$app: unmarked ${bw0} MB/s; marking beyond ${rate} MB/s: ${bw} MB/s, $m frames marked," \
       "$ecn CE received, $cnp CNPs sent, $handled CNPs cut the rate; Jain over the QPs $jain"
  ok=1
  gt "$bw" 0 || { echo "  FAIL: no throughput figure in the marked run's output"; ok=0; }
  gt "$m" 0 || { echo "  FAIL: the fabric marked nothing"; ok=0; }
  gt "$ecn" 0 || { echo "  FAIL: np_ecn_marked_roce_packets = $ecn"; ok=0; }
  gt "$cnp" 0 || { echo "  FAIL: np_cnp_sent = $cnp"; ok=0; }
  gt "$handled" 0 || { echo "  FAIL: rp_cnp_handled = $handled"; ok=0; }
  [ "$backlog" = 0 ] || { echo "  FAIL: np_rx_backlog_marked = $backlog with np_rx_ring_mark_enable=0"; ok=0; }
  [ "$retry" = 0 ] || { echo "  FAIL: retry_exceeded_err = $retry"; ok=0; }
  gt "$bw" "$(awk -v r="$rate" -v k="$max_ratio" 'BEGIN { print r * k }')" &&
    { echo "  FAIL: ${bw} MB/s is more than ${max_ratio} x the marking rate"; ok=0; }
  case $jain in
    n/a) ;;
    *) gt "$jain" 0.8 || { echo "  FAIL: the QPs did not share fairly (Jain $jain < 0.8)"; ok=0; } ;;
  esac
  if [ $ok = 1 ]; then echo "ok: $app"; else fail=1; fi
done
exit $fail
