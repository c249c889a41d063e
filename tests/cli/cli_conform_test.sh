#!/bin/sh
# `urxe conform` against another urxe (namespaces cfaPID/cfbPID joined by a veth, each with its own run directory;
# the peer's tools run through --peer-exec 'ip netns exec cfb ... urxe run --', its CM service started here):
# every scenario of the catalogue but H3 passes, the report (text, report.json) names each with its verdict and
# evidence frames, each run's pcapng slice opens in tshark with the fault rule's comment on its frame (the
# CM service's frames too: rules act on its MADs); a peer that deviates (urxe with its notification point
# off: no CNPs) fails H1 with exit 1, and report.html embeds the plot of that run; one with its reaction
# point off fails H3; and a peer address nobody answers gives an inconclusive verdict and exit 1 within the
# run's timeout, never a hang.
#   usage: cli_conform_test.sh URXE
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
for t in ib_write_bw ibv_rc_pingpong rping jq tshark; do
  command -v $t >/dev/null || { echo "SKIP: $t missing (tools/apt-packages.txt)"; exit 77; }
done
netns_private -m -t 200 "$0" "$@"
U=$1
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH URXE_LOG URXE_DEBUG URXE_PCAP
. "$(dirname "$0")/../lib/check.sh"
netns_devfs || exit 1
netns_tmpdir T urxe-conform-test || exit 1
na=cfa$$ nb=cfb$$  # (named by PID: another run of this test may be going on)
netns_pair $na $nb cva cvb 10.89.0.1/24 10.89.0.2/24 || exit 1
mkdir -p "$T/a" "$T/b"
A="ip netns exec $na env URXE_RUN_DIR=$T/a"
B="ip netns exec $nb env URXE_RUN_DIR=$T/b"
$A "$U" link add urxe0 netdev cva --port socket >/dev/null || exit 1
$B "$U" link add urxe1 netdev cvb --port socket >/dev/null || exit 1
$B "$U" cm --idle-exit 0 || exit 1
netns_at_exit "kill \$(cat $T/b/cm/*.pid) 2>/dev/null"

# Every scenario but H3: a urxe peer's reaction to CNPs depends on its host having a CPU for it (its rate
# limiter's timers and the CNPs' times are those of its progress thread, which an oversubscribed host runs
# in bursts: batched CNPs cut once, alpha decays over the gaps), as CI's is when tests run side by side.
# H3's judge is tested on made-up traces (conform_judge_test.cc); a peer deaf to CNPs fails it live below.
out=$(cd "$T" && $A "$U" conform --dev urxe0 --peer 10.89.0.2 --peer-dev urxe1 --only '^([A-G]|H[12]|I)' \
  --peer-exec "$B $U run --" --out "$T/r" 2>"$T/conform.err")
expect_rc "urxe conform against urxe: every scenario passes" 0 $?
n=$(($("$U" conform --list | tail -1 | cut -d' ' -f1) - 1))  # all but H3
[ "$(jq '.scenarios | length' "$T/r/report.json")" = "$n" ] && ok "  $n scenarios in the run" ||
  bad "  $(jq '.scenarios | length' "$T/r/report.json") scenarios in the run, want $n"
check "  the summary line" "^$n scenarios: $n pass, 0 FAIL, 0 inconclusive" "$out"
[ "$(jq '[.scenarios[] | select(.verdict == "pass")] | length' "$T/r/report.json")" = "$n" ] &&
  ok "  report.json: $n passes" || bad "  report.json: $(cat "$T/r/report.json")"
[ "$(jq '[.scenarios[] | select((.frames | length) == 0 and (.id | test("^(A9|D5)") | not))] | length' \
  "$T/r/report.json")" = 0 ] && ok "  every stimulus scenario names its evidence frames" ||
  bad "  scenarios without frames: $(jq -c '[.scenarios[] | select((.frames | length) == 0) | .id]' "$T/r/report.json")"
check "  A1: the peer's sequence NAK at the lost PSN" "observed: PSN 0x[0-9a-f]+ lost; the peer NAKed the next packet with PSN sequence error" "$out"
check "  E1: NAK remote access error" "NAK remote access error \(0x62\) at PSN" "$out"
check "  I7: REJ reason 8" "REJ reason 8 \(invalid service ID\)" "$out"
check "  A4: the peer goes back to the NAKed PSN" "observed: the peer went back to the NAKed PSN 0x[0-9a-f]+ with #[0-9]+ RC RDMA_WRITE_MIDDLE" "$out"
check "  A6: retry_cnt 7 is 8 transmissions" "observed: the peer sent PSN 0x[0-9a-f]+ 8 times" "$out"
c=$(tshark -r "$T/r/write-gap.pcapng" -T fields -e frame.comment 2>&1)
[ "$(printf '%s\n' "$c" | grep -c 'fault rule [0-9]*: drop (not sent)$')" = 1 ] &&
  ok "  write-gap.pcapng: the dropped frame marked" || bad "  write-gap.pcapng comments: $(printf '%s' "$c" | head -5)"
# the CM service's frames under the run's rules: the peer's REP and DREP it lost, marked in its capture
c=$(tshark -r "$T/r/cm-lost.pcapng" -T fields -e frame.comment 2>&1)
[ "$(printf '%s\n' "$c" | grep -c '^pid [0-9]* (urxe) in, .*fault rule [0-9]*: drop (not delivered)$')" = 2 ] &&
  ok "  cm-lost.pcapng: the CM service's lost REP and DREP marked" ||
  bad "  cm-lost.pcapng comments: $(printf '%s' "$c" | head -8)"
[ "$(grep -c '<tr class="pass">' "$T/r/report.html")" = "$n" ] && ok "  report.html: $n rows, all pass" ||
  bad "  report.html: $(grep -c '<tr class=' "$T/r/report.html") rows"

echo 0 >"$T/b/sys/class/infiniband/urxe1/cc_params/np_enable"
out=$(cd "$T" && $A "$U" conform --dev urxe0 --peer 10.89.0.2 --peer-dev urxe1 --only '^H1' \
  --peer-exec "$B $U run --" --out "$T/r3" 2>&1)
expect_rc "a peer sending no CNPs: exit 1" 1 $?
check "  H1 fails" "H1.cnp  FAIL" "$out"
[ -s "$T/r3/write-ce.svg" ] && grep -q '<tr class="fail"><td>H1.cnp</td>' "$T/r3/report.html" &&
  grep -q '<figure id="plot-write-ce">' "$T/r3/report.html" && grep -q '<svg' "$T/r3/report.html" &&
  ok "  report.html: the failing row and the run's plot embedded" || bad "  report.html: $(head -c 600 "$T/r3/report.html")"
echo 1 >"$T/b/sys/class/infiniband/urxe1/cc_params/np_enable"
# a peer that takes no notice of CNPs (its reaction point off): H3 fails, its rate unchanged under them
echo 0 >"$T/b/sys/class/infiniband/urxe1/cc_params/rp_enable"
out=$(cd "$T" && $A "$U" conform --dev urxe0 --peer 10.89.0.2 --peer-dev urxe1 --only '^H3' \
  --peer-exec "$B $U run --" --out "$T/r4" 2>&1)
expect_rc "a peer deaf to CNPs: exit 1" 1 $?
check "  H3 fails" "H3.cnp-rate  FAIL" "$out"
check "  H3 says the rate did not come down" "observed: the peer's rate did not come down under the CNPs" "$out"
echo 1 >"$T/b/sys/class/infiniband/urxe1/cc_params/rp_enable"

t0=$(date +%s)
out=$(cd "$T" && $A "$U" conform --dev urxe0 --peer 10.89.0.9 --peer-dev urxe1 --only '^I7' \
  --peer-exec "$B $U run --" --out "$T/r2" 2>&1)
expect_rc "a peer address nobody answers: exit 1" 1 $?
check "  an inconclusive verdict saying why" "I7.no-listener  inconclusive" "$out"
[ $(($(date +%s) - t0)) -le 20 ] && ok "  within the run's timeout" || bad "  took $(($(date +%s) - t0)) s"
exit $fail
