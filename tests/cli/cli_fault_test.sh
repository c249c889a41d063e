#!/bin/sh
# `urxe fault add/list/del/clear` and `urxe link add --fault` as a user types them, in a private mount +
# network namespace (veth va 10.67.0.1): rules added in canonical form with ids 1, 2, ... never reused,
# listed as text and JSON, removed; a malformed rule refused with exit 2 naming the bad word and the rules
# file unchanged; the 33rd rule refused; `link add --fault` good (the device starts with the rules) and bad
# (no device made); per-rule counters of processes that exited (urxe.stats/total.faults) in `fault list`
# and `urxe stats`; and a running application (ibv_rc_pingpong waiting for its client) taking a rule
# added by `urxe fault add` within 2 s (its info log line; the watcher wakes at once on the change); and
# rules on live traffic: ibv_rc_pingpong whose processes each lose their first SEND recovers, the rule's
# counters summed over them, each capture recording its lost frame with the rule's name.
#   usage: cli_fault_test.sh URXE
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
command -v ibv_rc_pingpong >/dev/null || { echo "SKIP: ibv_rc_pingpong missing (apt-get install ibverbs-utils)"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
command -v tshark >/dev/null || { echo "SKIP: tshark not installed"; exit 77; }
netns_private -t 100 "$0" "$@"
U=$1
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH URXE_LOG URXE_DEBUG
. "$(dirname "$0")/../lib/check.sh"
netns_private_veth URXE_RUN_DIR urxe-fault-test 10.67.0.1/24 || exit 1
export URXE_RUN_DIR
rules=$URXE_RUN_DIR/sys/class/infiniband/urxe0/urxe.fault/rules

# --- link add --fault
out=$("$U" link add urxe0 netdev va --port loop --fault 'dir tx every 2 drop' --fault 'dir rx bogus drop' 2>&1)
expect_rc "link add with a malformed --fault" 2 $?
check "  names the bad word" "bogus" "$out"
out=$("$U" link show 2>&1); [ -z "$out" ] && ok "  no device made" || bad "  a device was made: $out"
out=$("$U" link add urxe0 netdev va --port loop --fault 'drop dir tx every 2' --fault 'qpn 17 corrupt icrc' 2>&1)
expect_rc "link add with two --fault" 0 $?
check "  prints rule 1 in canonical form" "^urxe0: fault rule 1: dir tx every 2 drop$" "$out"
check "  and rule 2" "^urxe0: fault rule 2: qpn 0x11 corrupt icrc$" "$out"
out=$("$U" fault list urxe0 2>&1); expect_rc "fault list" 0 $?
check "  header" "^urxe0: 2 fault rules$" "$out"
check "  rule 1 with its hits" "^ +1 +0  dir tx every 2 drop$" "$out"
check "  rule 2" "^ +2 +0  qpn 0x11 corrupt icrc$" "$out"

# --- add / list --json / del / clear
out=$("$U" fault add urxe0 dir rx class ack prob 0.5 delay 2ms 2>&1); expect_rc "fault add (words)" 0 $?
check "  gets id 3" "^urxe0: rule 3: dir rx class ack prob 0.5 seed 1 delay 2ms$" "$out"
out=$("$U" fault add urxe0 'opcode send_only first 1 duplicate' 2>&1); expect_rc "fault add (one string)" 0 $?
check "  gets id 4" "^urxe0: rule 4: opcode send_only first 1 duplicate$" "$out"
json=$("$U" fault list urxe0 --json 2>&1); expect_rc "fault list --json" 0 $?
[ "$(printf '%s' "$json" | jq -c '[.rules[].id]')" = "[1,2,3,4]" ] && ok "  ids 1..4 in order" || bad "  ids: $json"
[ "$(printf '%s' "$json" | jq -r '.rules[2].rule')" = "dir rx class ack prob 0.5 seed 1 delay 2ms" ] &&
  ok "  rule text" || bad "  rule text: $json"
[ "$(printf '%s' "$json" | jq -c '.rules[0] | [.matched, .hits, .applied]')" = "[0,0,0]" ] &&
  ok "  counters at 0" || bad "  counters: $json"
gen=$(printf '%s' "$json" | jq .generation)

before=$(cat "$rules")
out=$("$U" fault add urxe0 dir sideways drop 2>&1); expect_rc "a malformed rule is a usage error" 2 $?
check "  naming the bad word" "sideways" "$out"
[ "$(cat "$rules")" = "$before" ] && ok "  rules file unchanged" || bad "  rules file changed"
out=$("$U" fault add urxe0 2>&1); expect_rc "fault add without RULE" 2 $?
out=$("$U" fault add nosuch drop 2>&1); expect_rc "fault add to a missing device" 1 $?
check "  names it" "no urxe device 'nosuch'" "$out"

out=$("$U" fault del urxe0 2 2>&1); expect_rc "fault del urxe0 2" 0 $?
out=$("$U" fault del urxe0 2 2>&1); expect_rc "fault del of a rule no longer there" 1 $?
check "  says so" "no rule 2 on urxe0" "$out"
out=$("$U" fault del urxe0 x 2>&1); expect_rc "fault del with a bad ID" 2 $?
json=$("$U" fault list urxe0 --json)
[ "$(printf '%s' "$json" | jq -c '[.rules[].id]')" = "[1,3,4]" ] && ok "  the others keep their ids" || bad "  ids: $json"
[ "$(printf '%s' "$json" | jq .generation)" -gt "$gen" ] && ok "  generation grew" || bad "  generation: $json"
out=$("$U" fault clear urxe0 2>&1); expect_rc "fault clear" 0 $?
out=$("$U" fault list urxe0 2>&1); check "  no rules left" "^urxe0: no fault rules$" "$out"
out=$("$U" fault add urxe0 drop 2>&1); check "ids are not reused after clear" "^urxe0: rule 5: drop$" "$out"

# --- at most 32 rules
for i in $(seq 2 32); do "$U" fault add urxe0 "qpn $i drop" >/dev/null 2>&1 || bad "rule $i refused"; done
[ "$("$U" fault list urxe0 --json | jq '.rules | length')" = 32 ] && ok "32 rules" || bad "not 32 rules"
before=$(cat "$rules")
out=$("$U" fault add urxe0 qpn 33 drop 2>&1); expect_rc "the 33rd rule is refused" 1 $?
check "  saying why" "32 fault rules, the most a device takes" "$out"
[ "$(cat "$rules")" = "$before" ] && ok "  rules file unchanged" || bad "  rules file changed"
"$U" fault clear urxe0

# --- counters of processes that exited (as a context folds them at close), in fault list and stats
"$U" fault add urxe0 dir tx every 2 drop >/dev/null  # id 37
printf '37 10 5 4\n9 3 3 3\n' >"$URXE_RUN_DIR/sys/class/infiniband/urxe0/urxe.stats/total.faults"
out=$("$U" fault list urxe0 2>&1)
check "fault list: hits of exited processes" "^ +37 +5  dir tx every 2 drop$" "$out"
json=$("$U" stats urxe0 --json)
[ "$(printf '%s' "$json" | jq -c '[.faults[] | [.id, .rule, .matched, .hits, .applied]]')" = \
  '[[9,null,3,3,3],[37,"dir tx every 2 drop",10,5,4]]' ] && ok "stats --json: faults, a removed rule without text" ||
  bad "stats --json faults: $(printf '%s' "$json" | jq -c .faults)"
out=$("$U" stats urxe0 2>&1)
check "stats: rule 37's counters" "rule 37 +10 +5 +4  dir tx every 2 drop" "$out"
check "stats: removed rule 9" "rule 9 +3 +3 +3  \(removed\)" "$out"

# --- a running application takes a rule within 2 s
"$U" fault clear urxe0
log=$URXE_RUN_DIR/server.log
URXE_LOG=info "$U" run -- ibv_rc_pingpong -d urxe0 -g 1 >"$log" 2>&1 &
srv=$!
netns_at_exit "kill $srv 2>/dev/null"
live=0
for i in $(seq 100); do
  live=$("$U" stats urxe0 --json 2>/dev/null | jq '[.processes[] | select(.alive)] | length')
  [ "${live:-0}" -ge 1 ] && break
  sleep 0.1
done
[ "${live:-0}" -ge 1 ] && ok "the server has urxe0 open" || bad "the server never opened urxe0: $(cat "$log")"
check "  it read the (empty) rules at open" "urxe0: fault rules: 0 rule\(s\) in force" "$(cat "$log")"
t0=$(date +%s%N)
"$U" fault add urxe0 dir rx class request drop >/dev/null
took=
for i in $(seq 200); do
  if grep -q "fault rules: 1 rule(s) in force" "$log"; then took=$((($(date +%s%N) - t0) / 1000000)); break; fi
  sleep 0.01
done
if [ -n "$took" ] && [ "$took" -lt 2000 ]; then ok "  took the added rule after $took ms"
else bad "  did not take the rule within 2 s: $(cat "$log")"; fi
"$U" fault del urxe0 "$("$U" fault list urxe0 --json | jq '.rules[0].id')"
for i in $(seq 200); do grep -q "fault rules: 0 rule(s) in force (generation" "$log" && [ "$(grep -c "0 rule(s)" "$log")" -ge 2 ] && break; sleep 0.01; done
[ "$(grep -c "fault rules: 0 rule(s) in force" "$log")" -ge 2 ] && ok "  and its removal" || bad "  removal not seen: $(cat "$log")"
printf 'generation 99\nnext-id 1\nrule 1 drop\n' >"$rules"  # hand-edited, wrong: rule id not below next-id
for i in $(seq 200); do grep -q "keeping the 0 rule(s)" "$log" && break; sleep 0.01; done
check "  a bad hand edit: one warning, the old rules kept" "warn: urxe0: fault rules: .*not below next-id.*keeping the 0 rule\(s\) in force" "$(cat "$log")"
kill $srv 2>/dev/null
wait $srv 2>/dev/null

# --- the rules act on live traffic: each process's first SEND ONLY on the device is lost (a rule's
# selectors count per process); ibv_rc_pingpong recovers by its retransmit timer, and the rule's counters,
# summed over the processes, say what it did
"$U" link del urxe0
"$U" link add urxe0 netdev va --port socket --pcap "$URXE_RUN_DIR/pcap" \
  --fault 'dir tx opcode rc_send_only first 1 drop' >/dev/null
"$U" run -- ibv_rc_pingpong -d urxe0 -g 1 -n 20 -s 512 >"$URXE_RUN_DIR/pp-server.log" 2>&1 &
srv=$!
for i in $(seq 100); do ss -Hltn 'sport = :18515' | grep -q . && break; sleep 0.05; done
timeout 30 "$U" run -- ibv_rc_pingpong -d urxe0 -g 1 -n 20 -s 512 10.67.0.1 >"$URXE_RUN_DIR/pp-client.log" 2>&1
expect_rc "ibv_rc_pingpong client with its first SEND lost" 0 $?
wait $srv
expect_rc "  and its server" 0 $?
json=$("$U" stats urxe0 --json)
# (a spurious resend under load adds a match: at least 20 each way and the 2 resends)
[ "$(printf '%s' "$json" | jq -c '[.faults[] | [.id, .matched >= 42, .hits, .applied]]')" = '[[1,true,2,2]]' ] &&
  ok "  rule 1: at least 42 SEND ONLYs matched (20 each way, 2 resent), 2 hits, 2 dropped" ||
  bad "  rule counters: $(printf '%s' "$json" | jq -c .faults)"
retries=$(printf '%s' "$json" | jq '[.. | objects | .completer_retry_err? // empty] | max // 0')
[ "${retries:-0}" -ge 1 ] && ok "  the sender retransmitted (completer_retry_err $retries)" ||
  bad "  no retransmission counted: $(printf '%s' "$json" | jq -c .)"
# each process's capture records its lost SEND once, named by the rule
n=0
for f in "$URXE_RUN_DIR"/pcap/*.pcapng; do
  n=$((n + 1))
  c=$(tshark -r "$f" -T fields -e frame.comment 2>/dev/null)
  [ "$(printf '%s\n' "$c" | grep -c 'fault rule 1: drop (not sent)$')" = 1 ] &&
    ok "  ${f##*/}: the dropped SEND recorded as not sent" || bad "  ${f##*/}: comments: $c"
done
[ $n = 2 ] && ok "  two captures, one per process" || bad "  $n captures"

# --- the same on receive: each process's first SEND ONLY received is lost; the capture records received
# frames after the rules, so it holds the lost one, marked as not delivered
"$U" link del urxe0
"$U" link add urxe0 netdev va --port socket --pcap "$URXE_RUN_DIR/pcap-rx" \
  --fault 'dir rx opcode rc_send_only first 1 drop' >/dev/null
"$U" run -- ibv_rc_pingpong -d urxe0 -g 1 -n 20 -s 512 >"$URXE_RUN_DIR/pp-server.log" 2>&1 &
srv=$!
for i in $(seq 100); do ss -Hltn 'sport = :18515' | grep -q . && break; sleep 0.05; done
timeout 30 "$U" run -- ibv_rc_pingpong -d urxe0 -g 1 -n 20 -s 512 10.67.0.1 >"$URXE_RUN_DIR/pp-client.log" 2>&1
expect_rc "ibv_rc_pingpong client with its first SEND received lost" 0 $?
wait $srv
expect_rc "  and its server" 0 $?
json=$("$U" stats urxe0 --json)
[ "$(printf '%s' "$json" | jq -c '[.faults[] | [.id, .matched >= 42, .hits, .applied]]')" = '[[1,true,2,2]]' ] &&
  ok "  rule 1: at least 42 SEND ONLYs received (2 resent), 2 hits, 2 dropped" ||
  bad "  rule counters: $(printf '%s' "$json" | jq -c .faults)"
n=0
for f in "$URXE_RUN_DIR"/pcap-rx/*.pcapng; do
  n=$((n + 1))
  c=$(tshark -r "$f" -T fields -e frame.comment 2>/dev/null)
  [ "$(printf '%s\n' "$c" | grep -c '^pid .* in, .*fault rule 1: drop (not delivered)$')" = 1 ] &&
    ok "  ${f##*/}: the dropped received SEND recorded as not delivered" || bad "  ${f##*/}: comments: $c"
  # and only once: the frames the engine took are recorded after the rules, the lost one not among them
  [ "$(printf '%s\n' "$c" | grep -c 'fault rule')" = 1 ] && ok "  ${f##*/}: no other frame marked" ||
    bad "  ${f##*/}: comments: $c"
done
[ $n = 2 ] && ok "  two captures, one per process" || bad "  $n captures"

"$U" link del urxe0
exit $fail
