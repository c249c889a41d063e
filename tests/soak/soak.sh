#!/bin/bash
# Soak: two urxe devices in namespaces skaPID/skbPID joined by a veth, random fault rules on both (drop, duplicate,
# delay, reorder, bad ICRC, CE marks; each `prob P seed N`, so a seed names the fault pattern), and for
# SECONDS three kinds of work side by side, each a bounded loop:
#   cm    rping clients (-V: each ping's data checked) connecting to and disconnecting from one persistent
#         rping server (-P), a random size and count each time; every 4th time instead a client and server
#         pair of its own, one of them killed (SIGKILL) at a random time;
#   data  rdma_check pairs: multi-packet READs, WRITEs read back, FETCH_ADD/CMP_SWAP, each result checked;
#   qps   ib_write_bw with 32 QPs; every other pair has its client or its server killed mid-run.
# Checks: every run not killed exited 0 (its data checked end to end; an rping client whose every ping was
# checked and which then hit rping 44's own teardown race, tests/lib/check.sh, is counted apart); each kind ran at least a few times;
# every fault rule hit; the long-lived processes (the persistent server, both CM services) are still alive
# and their resident memory stayed flat (growth from the first quarter of the run to its end at most
# URXE_SOAK_RSS_GROWTH_KB, default 2048); no process of a killed run is left on either device.
# URXE_SOAK_LOGS=DIR keeps the outputs of the runs that failed (and of the rping server) there. Prints one summary line (counts, hits, RSS) and, with SUMMARY_FILE, writes it there as JSON.
#   usage: soak.sh URXE RDMA_CHECK SECONDS SEED [SUMMARY_FILE]
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
for t in rping ib_write_bw jq; do
  command -v $t >/dev/null || { echo "SKIP: $t missing (tools/apt-packages.txt)"; exit 77; }
done
netns_private -m -t $(($3 + 180)) "$0" "$@"
U=$1 RDMA_CHECK=$2 DUR=$3 SEED=$4 SUMMARY=${5:-}
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH URXE_LOG URXE_DEBUG URXE_PCAP
. "$(dirname "$0")/../lib/check.sh"
netns_devfs || exit 1
netns_tmpdir T urxe-soak || exit 1
na=ska$$ nb=skb$$
ns() { if [ "$1" = a ]; then echo $na; else echo $nb; fi; }
netns_pair $na $nb sk0 sk1 10.91.0.1/24 10.91.0.2/24 || exit 1
mkdir -p "$T/a" "$T/b" "$T/log"
A="ip netns exec $na env URXE_RUN_DIR=$T/a $U run --"
B="ip netns exec $nb env URXE_RUN_DIR=$T/b $U run --"
ip netns exec $na env URXE_RUN_DIR="$T/a" "$U" link add urxe0 netdev sk0 --port socket >/dev/null || exit 1
ip netns exec $nb env URXE_RUN_DIR="$T/b" "$U" link add urxe1 netdev sk1 --port socket >/dev/null || exit 1
for s in a b; do
  ip netns exec $(ns $s) env URXE_RUN_DIR="$T/$s" "$U" cm --idle-exit 0 || exit 1
done
netns_at_exit "kill \$(cat $T/a/cm/*.pid $T/b/cm/*.pid) 2>/dev/null"

# The fault rules: the same on both devices, each with its own seed derived from SEED.
rules=("prob 0.002 drop" "prob 0.002 duplicate" "prob 0.002 delay 1ms" "prob 0.002 reorder 3"
  "dir rx prob 0.001 corrupt icrc" "prob 0.01 ecn-ce")
nrules=${#rules[@]}
for k in "${!rules[@]}"; do
  ip netns exec $na env URXE_RUN_DIR="$T/a" "$U" fault add urxe0 "${rules[k]} seed $((SEED * 16 + k))" >/dev/null &&
    ip netns exec $nb env URXE_RUN_DIR="$T/b" "$U" fault add urxe1 "${rules[k]} seed $((SEED * 16 + k + 8))" \
      >/dev/null || { echo "FAIL: the rule '${rules[k]}' was refused"; exit 1; }
done

RANDOM=$SEED
end=$(($(date +%s) + DUR))
max_runs=$((DUR * 10))  # each loop's bound in runs besides its time (a run takes 0.1 s at the very least)
# A persistent rping server: every client of the cm loop connects to it.
# Its buffer is the largest a client uses: it READs the client's whole buffer into its own.
$A rping -s -P -V -S 16384 -a 10.91.0.1 -p 7471 >"$T/log/rping-server" 2>&1 &
rping_srv=$!
netns_at_exit "kill $rping_srv 2>/dev/null"
sleep 0.5

# kill_later PID SECS: SIGKILL the process group PID leads after SECS, unless it ended.
kill_later() { (sleep "$2"; kill -9 -- -"$1" 2>/dev/null) & }
# kill_pair SERVER CLIENT: SIGKILL one of the two (by chance) within a second, the other if it has not
# ended 3 s later (a server whose client died before connecting waits for nobody).
kill_pair() {
  if [ $((RANDOM % 2)) = 0 ]; then set -- "$2" "$1"; fi
  kill_later "$1" "0.$((RANDOM % 10))"
  wait "$1" 2>/dev/null
  kill_later "$2" 3
  wait "$2" 2>/dev/null
}
# run_bounded VAR OUTFILE CMD...: CMD in its own process group (a child of this shell); its PID in VAR.
# Its stdout goes to OUTFILE, its stderr to OUTFILE.err (the two interleave mid-line in one file).
run_bounded() {
  _v=$1 _o=$2
  shift 2
  setsid "$@" >"$_o" 2>"$_o.err" &
  eval "$_v=\$!"
}

cm_loop() {
  _n=0 _ok=0 _killed=0 _bad=0 _race=0
  while [ "$(date +%s)" -lt $end ] && [ $_n -lt $max_runs ]; do
    _n=$((_n + 1))
    _count=$((2 + RANDOM % 30))
    _size=$((64 + RANDOM % 16000))
    if [ $((_n % 4)) = 0 ]; then
      # A pair of its own (a persistent rping server exits on the REJ a client killed mid-connect makes
      # its CM send, as it does over the kernel's CM): the client or the server killed at a random time.
      _port=$((30000 + _n % 5000))
      # (not waited for: a client that comes before the server listens gets a REJ, one more way to end)
      run_bounded _s "$T/log/cmk.$_n.s" timeout 40 $A rping -s -V -S $_size -C $_count -a 10.91.0.1 -p $_port
      run_bounded _c "$T/log/cmk.$_n.c" timeout 40 $B rping -c -V -S $_size -C $_count -a 10.91.0.1 -p $_port
      kill_pair "$_s" "$_c"
      rm -f "$T/log/cmk.$_n."*
      _killed=$((_killed + 1))
      continue
    fi
    run_bounded _p "$T/log/cm.$_n" timeout 40 $B rping -c -v -V -a 10.91.0.1 -p 7471 -C $_count -S $_size
    # -v prints each ping's data after -V checked it: a run that ended early without an error is caught too.
    wait "$_p"
    _rc=$?
    _pings=$(grep -c '^ping data: ' "$T/log/cm.$_n")
    if [ $_rc = 0 ] && [ "$_pings" = $_count ]; then
      _ok=$((_ok + 1))
      rm -f "$T/log/cm.$_n"*  # only a failed run's output is kept
    elif [ "$_pings" = $_count ] && [ -n "$(known_app_race "$T/log/cm.$_n.err")" ]; then
      # Every ping checked, then rping 44's own teardown race (tests/lib/check.sh): counted and reported,
      # not taken for urxe's failure.
      _ok=$((_ok + 1)) _race=$((_race + 1))
      rm -f "$T/log/cm.$_n"*
    else
      _bad=$((_bad + 1))
      echo "FAIL: rping client $_n: $(grep -c '^ping data: ' "$T/log/cm.$_n") of $_count pings; $(tail -n 3 "$T/log/cm.$_n.err" | tr '\n' ' ')"
    fi
  done
  echo "cm $_ok $_killed $_bad $_race" >"$T/log/cm.result"
}

data_loop() {
  _n=0 _ok=0 _bad=0
  while [ "$(date +%s)" -lt $end ] && [ $_n -lt $max_runs ]; do
    _n=$((_n + 1))
    _port=$((20000 + _n % 5000))
    _size=$((4096 * (1 + RANDOM % 64)))
    _m=$((1 + RANDOM % 16))  # READs per pass (rdma_check takes at most 32)
    run_bounded _s "$T/log/data.$_n.s" timeout 40 $A "$RDMA_CHECK" -d urxe0 -g 1 -s $_size -p $_port
    netns_wait_listen "$_s" $na $_port
    run_bounded _c "$T/log/data.$_n.c" timeout 40 $B "$RDMA_CHECK" -d urxe1 -g 1 -s $_size \
      -c $(((_size + _m - 1) / _m)) -n $((1 + RANDOM % 64)) -p $_port 10.91.0.1
    wait "$_c"
    _crc=$?
    wait "$_s"
    if [ $? = 0 ] && [ $_crc = 0 ]; then
      _ok=$((_ok + 1))
      rm -f "$T/log/data.$_n."*
    else
      _bad=$((_bad + 1))
      echo "FAIL: rdma_check $_n: $(tail -n 3 -q "$T/log/data.$_n.s.err" "$T/log/data.$_n.c.err" | tr '\n' ' ')"
    fi
  done
  echo "data $_ok 0 $_bad" >"$T/log/data.result"
}

qps_loop() {
  _n=0 _ok=0 _killed=0 _bad=0
  while [ "$(date +%s)" -lt $end ] && [ $_n -lt $max_runs ]; do
    _n=$((_n + 1))
    _port=$((25000 + _n % 5000))
    run_bounded _s "$T/log/qps.$_n.s" timeout 40 $A ib_write_bw -d urxe0 -x 1 -q 32 -s 8192 -n 200 -p $_port
    netns_wait_listen "$_s" $na $_port
    run_bounded _c "$T/log/qps.$_n.c" timeout 40 $B ib_write_bw -d urxe1 -x 1 -q 32 -s 8192 -n 200 \
      -p $_port 10.91.0.1
    if [ $((_n % 2)) = 0 ]; then
      kill_pair "$_s" "$_c"
      rm -f "$T/log/qps.$_n."*
      _killed=$((_killed + 1))
      continue
    fi
    wait "$_c"
    _crc=$?
    wait "$_s"
    if [ $? = 0 ] && [ $_crc = 0 ]; then
      _ok=$((_ok + 1))
      rm -f "$T/log/qps.$_n."*
    else
      _bad=$((_bad + 1))
      echo "FAIL: ib_write_bw $_n: $(tail -n 2 -q "$T/log/qps.$_n.s"* "$T/log/qps.$_n.c"* | tr '\n' ' ')"
    fi
  done
  echo "qps $_ok $_killed $_bad" >"$T/log/qps.result"
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# The long-lived processes: the rping server (the process `urxe run` became) and both CM services.
long_lived="$rping_srv $(cat "$T/a/cm/"*.pid) $(cat "$T/b/cm/"*.pid)"

cm_loop &
l1=$!
data_loop &
l2=$!
qps_loop &
l3=$!
sleep $((DUR / 4))
rss0=""
for p in $long_lived; do rss0="$rss0 $(rss_kb "$p")"; done
wait $l1 $l2 $l3
sleep 1  # a killed process's last frames and the peers' teardown
rss1=""
for p in $long_lived; do rss1="$rss1 $(rss_kb "$p")"; done

for p in $long_lived; do
  kill -0 "$p" 2>/dev/null && ok "long-lived process $p alive" || bad "long-lived process $p died"
done
kill -0 $rping_srv 2>/dev/null || { wait $rping_srv; echo "  the rping server's exit status: $?; its output:"; tail -n 5 "$T/log/rping-server" | cut -c1-200; }
growth=${URXE_SOAK_RSS_GROWTH_KB:-2048}
set -- $rss1
for r0 in $rss0; do
  [ "$1" -le $((r0 + growth)) ] && [ "$1" -gt 0 ] && ok "RSS flat: $r0 -> $1 kB" || bad "RSS grew: $r0 -> $1 kB"
  shift
done
summary=""
for kind in cm data qps; do
  read -r _k okn killed badn race <"$T/log/$kind.result" || { bad "$kind: no result"; continue; }
  summary="$summary $kind ${okn}ok/${killed}killed/${badn}failed${race:+ (${race} ended by the rping teardown race)};"
  [ "$badn" = 0 ] && ok "$kind: $okn runs checked, $killed killed, none failed" || bad "$kind: $badn runs failed"
  [ "$okn" -ge 3 ] || bad "$kind: only $okn runs completed"
done
hits=""
for s in a b; do
  d=urxe0
  [ $s = b ] && d=urxe1
  h=$(ip netns exec $(ns $s) env URXE_RUN_DIR="$T/$s" "$U" fault list $d --json | jq -r '[.rules[].hits] | join(",")')
  hits="$hits $d:$h"
  n=$(ip netns exec $(ns $s) env URXE_RUN_DIR="$T/$s" "$U" fault list $d --json | jq '[.rules[] | select(.hits > 0)] | length')
  [ "$n" = "$nrules" ] && ok "$d: every fault rule hit ($h)" || bad "$d: rules hit: $h"
done
kill "$rping_srv" 2>/dev/null
wait "$rping_srv" 2>/dev/null
for s in a b; do
  d=urxe0
  [ $s = b ] && d=urxe1
  cmpid=$(cat "$T/$s/cm/"*.pid)  # the CM service stays (it has a counters file as the apps have)
  left() { URXE_RUN_DIR=$T/$s "$U" stats $d -p --json | jq -c "[.processes[] | select(.alive and .pid != $cmpid) | .pid]"; }
  none_left() { [ "$(left)" = "[]" ]; }
  netns_wait_for 5 none_left && ok "$d: no process left but its CM service" || bad "$d: processes left: $(left)"
done
echo "soak ${DUR}s seed $SEED:$summary fault hits$hits; RSS kB (rping server, cm a, cm b)$rss0 ->$rss1"
[ -z "${URXE_SOAK_LOGS:-}" ] || cp -r "$T/log" "$URXE_SOAK_LOGS"  # the tools' outputs, to look into
if [ -n "$SUMMARY" ]; then
  printf '{"seconds":%s,"seed":%s,"summary":"%s","hits":"%s","rss_start_kb":"%s","rss_end_kb":"%s","fail":%s}\n' \
    "$DUR" "$SEED" "$summary" "$hits" "$rss0" "$rss1" "$fail" >"$SUMMARY"
fi
exit $fail
