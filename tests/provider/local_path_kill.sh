#!/bin/sh
# The same-host path when a process dies: two processes on urxe0 in one namespace (the path is on by default),
# ib_write_bw between them; the server is killed (SIGKILL) once the traffic flows. The client must end as it
# does over the wire, with its WRITEs failing IBV_WC_RETRY_EXC_ERR (status 12), within the retry budget
# (timeout 14 = 67 ms, 7 retries, growing to 4x: a few seconds); and the dead server's ring must be gone
# from the device's directory of rings (RUN_DIR/local/MAC/) afterwards (the client removes what a dead process left), as must the
# client's own once it exited.
#   usage: local_path_kill.sh DEVCTL PROVIDER_SO
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
netns_private -t 120 "$0" "$@"
devctl=$1; so=$2
netns_devfs || exit 1
netns_veth va vb 10.89.0.1/24 || exit 1
netns_wait_up va
netns_tmpdir tmp urxe-local-kill || exit 1
export URXE_RUN_DIR="$tmp/run" URXE_PROVIDER="$so"
unset URXE_LOCAL_PATH
"$devctl" link add urxe0 netdev va >/dev/null || exit 1
eval "$("$devctl" env)"
dir="$URXE_RUN_DIR/local/$(ip -o link show va | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p' | tr -d :)"
fail=0
app="ib_write_bw -d urxe0 -x 1 -s 65536 -D 20"
# shellcheck disable=SC2086
timeout 60 $app >"$tmp/server" 2>&1 &
srv=$!
netns_wait_listen $srv
# shellcheck disable=SC2086
timeout 60 $app 10.89.0.1 >"$tmp/client" 2>&1 &
cli=$!
# The run under way before the kill: both processes' rings published, and the client's WRITEs flowing (the
# device's sent_pkts past a thousand, a few dozen 64 KiB messages; the counters are live in shared memory).
rings() { set -- "$dir"/*.seg; if [ -e "$1" ]; then echo $#; else echo 0; fi; }
sent() { "$devctl" stats urxe0 --json 2>/dev/null | sed -n 's/.*"sent_pkts":\([0-9]*\).*/\1/p' | head -1; }
# shellcheck disable=SC2317  # called through netns_wait_for
running() {
  { [ "$(rings)" = 2 ] && [ "$(sent)" -ge 1000 ] 2>/dev/null; } || ! kill -0 "$cli" 2>/dev/null
}
netns_wait_for 30 running || echo "note: after 30 s, $(sent) packets sent"
segs=$(rings)
if [ "$segs" = 2 ]; then echo "ok: both processes published a ring"; else
  echo "FAIL: $segs rings in $dir while both run, want 2"; fail=1; fi
app_pid=$(pgrep -P $srv)  # the server itself, not its timeout
kill -9 $app_pid
wait $srv 2>/dev/null
t0=$(date +%s)
wait $cli
crc=$?
secs=$(($(date +%s) - t0))
if [ $crc -ne 0 ] && grep -q "Failed status 12" "$tmp/client"; then
  echo "ok: the client failed with RETRY_EXC_ERR ${secs} s after the server died"
else
  echo "FAIL: client rc $crc, want a failure with status 12"
  sed 's/^/  client: /' "$tmp/client" | tail -15
  fail=1
fi
left=$(ls "$dir" 2>/dev/null | tr '\n' ' ')
if [ -z "$left" ]; then echo "ok: no ring left in $dir"; else
  echo "FAIL: left in $dir: $left"; fail=1; fi
exit $fail
