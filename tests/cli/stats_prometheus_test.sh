#!/bin/sh
# urxe's counters in Prometheus, beside a host's own node_exporter (Debian's prometheus-node-exporter, run
# as an unprivileged user as Debian runs it): ibv_rc_pingpong between two namespaces (veth pair, urxe0 on
# each side, each with its own run directory), then on the server's side:
#  - `urxe stats --prometheus` prints the port figures under node_exporter's infiniband names and every
#    counter as urxe_<name>_total, each equal to `urxe stats --json`'s;
#  - `--output FILE` feeds the textfile collector of an exporter that keeps its other collectors: its
#    /metrics has urxe_sent_pkts_total and node_infiniband_port_packets_transmitted_total for urxe0, no
#    textfile scrape error, and its own collectors still answer (node_uname_info);
#  - a second exporter limited to the infiniband collector, its --path.sysfs at urxe's tree, reads the
#    same port counters from the tree's counters/ files (collector success 1);
#  - `urxe stats --watch` adds a line of rates per device while ib_write_bw runs.
#   usage: stats_prometheus_test.sh URXE PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
for t in ibv_rc_pingpong ib_write_bw jq prometheus-node-exporter setpriv; do
  command -v $t >/dev/null || { echo "SKIP: $t missing (tools/apt-packages.txt)"; exit 77; }
done
netns_private -m -t 120 "$0" "$@"
urxe=$1 so=$2
. "$(dirname "$0")/../lib/check.sh"
mkdir -p /dev/infiniband
a=uprA$$ b=uprB$$
netns_tmpdir tmp urxe-prom || exit 1
chmod 755 "$tmp"
pids=
netns_at_exit 'for p in $pids; do kill "$p" 2>/dev/null; done'
netns_pair $a $b va vb 10.89.0.1/24 10.89.0.2/24 || exit 1
side() {  # side NS IFACE RUN_DIR OUTFILE CMD...
  _sd_ns=$1 _sd_if=$2 _sd_run=$3 _sd_out=$4
  shift 4
  netns_urxe_side_in "$_sd_run" "$_sd_ns" "$_sd_if" "$_sd_out" "$urxe" "$so" "" "$@"
}
stats() { URXE_RUN_DIR=$tmp/runA "$urxe" stats "$@"; }

side $a va "$tmp/runA" "$tmp/server" ibv_rc_pingpong -d urxe0 -g 1 -n 50 -s 64 &
srv=$!
sleep 1
side $b vb "$tmp/runB" "$tmp/client" ibv_rc_pingpong -d urxe0 -g 1 -n 50 -s 64 10.89.0.1
expect_rc "ibv_rc_pingpong client" 0 $?
wait $srv
expect_rc "ibv_rc_pingpong server" 0 $?

# The exposition against the JSON: same figures, node_exporter's names for the port.
prom=$(stats urxe0 --prometheus)
expect_rc "urxe stats --prometheus" 0 $?
json=$(stats urxe0 --json)
sent=$(printf '%s' "$json" | jq .counters.sent_pkts)
rcvd=$(printf '%s' "$json" | jq .counters.rcvd_bytes)
[ "${sent:-0}" -ge 100 ] && ok "  the server sent $sent packets" || bad "  sent_pkts $sent"
check "  urxe_sent_pkts_total as --json" "^urxe_sent_pkts_total\{device=\"urxe0\",port=\"1\"\} $sent\$" "$prom"
check "  node_infiniband_port_packets_transmitted_total" \
  "^node_infiniband_port_packets_transmitted_total\{device=\"urxe0\",port=\"1\"\} $sent\$" "$prom"
check "  node_infiniband_port_data_received_bytes_total in whole words" \
  "^node_infiniband_port_data_received_bytes_total\{device=\"urxe0\",port=\"1\"\} $((rcvd / 4 * 4))\$" "$prom"
check "  the port ACTIVE, link up" "^node_infiniband_state_id\{device=\"urxe0\",port=\"1\"\} 4\$" "$prom"
check "  node_infiniband_info" '^node_infiniband_info\{device="urxe0",board_id="[^"]*",firmware_version="[^"]+",hca_type="[^"]*"\} 1$' "$prom"
check "  DCQCN's counters" '^urxe_np_cnp_sent_total\{device="urxe0",port="1"\} 0$' "$prom"
check "  retransmitted_pkts" '^urxe_retransmitted_pkts_total\{device="urxe0",port="1"\} [0-9]+$' "$prom"
check "  HELP and TYPE once per family" "^# TYPE urxe_sent_pkts_total counter\$" "$prom"
[ "$(printf '%s\n' "$prom" | grep -c '^# TYPE urxe_sent_pkts_total ')" = 1 ] && ok "  one TYPE line" ||
  bad "  TYPE lines: $(printf '%s\n' "$prom" | grep -c '^# TYPE urxe_sent_pkts_total ')"
[ "$(printf '%s\n' "$prom" | grep -vc '^#\|^[a-z_]*{[^}]*} [0-9]*$')" = 0 ] && ok "  every sample NAME{LABELS} VALUE" ||
  bad "  other lines: $(printf '%s\n' "$prom" | grep -v '^#\|^[a-z_]*{[^}]*} [0-9]*$' | head -3)"
stats urxe0 --json --prometheus >/dev/null 2>&1
expect_rc "  --json with --prometheus: a usage error" 2 $?

# Beside the host's exporter: its textfile collector, all its other collectors on, as user nobody.
mkdir -m 755 "$tmp/textfile"
stats --prometheus --output "$tmp/textfile/urxe.prom"
expect_rc "urxe stats --prometheus --output" 0 $?
[ "$(stat -c %a "$tmp/textfile/urxe.prom")" = 644 ] && ok "  the file is world-readable" ||
  bad "  mode $(stat -c %a "$tmp/textfile/urxe.prom")"
[ -z "$(ls -A "$tmp/textfile" | grep -v '^urxe.prom$')" ] && ok "  no temporary file left" || bad "  $(ls -A "$tmp/textfile")"
scrape() {  # scrape PORT: the /metrics of the exporter in namespace $a
  ip netns exec $a /usr/bin/python3 -c \
    'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "http://127.0.0.1:$1/metrics"
}
exporter() {  # exporter PORT ARGS...: Debian's node_exporter as user nobody, in namespace $a (its loopback)
  port=$1
  shift
  ip netns exec $a setpriv --reuid=65534 --regid=65534 --clear-groups \
    prometheus-node-exporter --web.listen-address=127.0.0.1:$port "$@" >"$tmp/exporter.$port.log" 2>&1 &
  pids="$pids $!"
  netns_wait_for 10 ip netns exec $a sh -c "ss -ltn | grep -q 127.0.0.1:$port" || bad "exporter on $port did not listen"
}
ip -n $a link set lo up
exporter 19100 --collector.textfile.directory="$tmp/textfile"
m=$(scrape 19100)
check "  textfile: urxe_sent_pkts_total" "^urxe_sent_pkts_total\{device=\"urxe0\",port=\"1\"\} $sent\$" "$m"
check "  textfile: the port counters under the infiniband names" \
  "^node_infiniband_port_packets_transmitted_total\{device=\"urxe0\",port=\"1\"\} $sent\$" "$m"
check "  textfile: no scrape error" '^node_textfile_scrape_error 0$' "$m"
check "  the exporter's own collectors still answer" '^node_uname_info\{' "$m"

# A second exporter for urxe's tree only: the infiniband collector reads its counters/ files.
exporter 19101 --collector.disable-defaults --collector.infiniband --path.sysfs="$tmp/runA/sys"
m=$(scrape 19101)
check "  infiniband collector on urxe's tree: success" '^node_scrape_collector_success\{collector="infiniband"\} 1$' "$m"
check "  infiniband collector: the same packets" \
  "^node_infiniband_port_packets_transmitted_total\{device=\"urxe0\",port=\"1\"\} $sent\$" "$m"

# --watch: a line of rates per round after the first, while traffic runs.
side $a va "$tmp/runA" "$tmp/bw_server" ib_write_bw -d urxe0 -x 1 -F -s 65536 -D 3 &
bw="$!"
sleep 1
side $b vb "$tmp/runB" "$tmp/bw_client" ib_write_bw -d urxe0 -x 1 -F -s 65536 -D 3 10.89.0.1 &
bw="$bw $!"
pids="$pids $bw"
sleep 2
w=$(stats urxe0 --watch 0.5 --count 3)
check "  --watch: the rates line" '^  rates: tx [0-9]+ pkts/s [0-9.]+ Gbit/s, rx [1-9][0-9]* pkts/s [0-9.]+ Gbit/s, drops [0-9]+/s, retransmits [0-9]+/s$' "$w"
[ "$(printf '%s\n' "$w" | grep -c '^  rates: tx ')" = 2 ] && ok "  one per round after the first" ||
  bad "  $(printf '%s\n' "$w" | grep -c '^  rates: tx ') rate lines"
[ "$(printf '%s\n' "$w" | grep -c '^urxe0: ')" = 3 ] && ok "  under each round's device line" ||
  bad "  $(printf '%s\n' "$w" | grep -c '^urxe0: ') device lines"
for p in $bw; do wait "$p"; done
exit $fail
