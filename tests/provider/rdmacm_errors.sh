#!/bin/sh
# librdmacm's error paths over urxe0 (under in_netns.sh, via ucma_shim.sh which stops the CM service at exit):
# rdmacm_errors.c twice (its end kills the service, so the second run must start a new one), and a SIGKILLed
# rping client gives its server the DISCONNECTED event.
#   usage: rdmacm_errors.sh RDMACM_ERRORS_TEST
set -u
# shellcheck disable=SC1091  # netns_wait_for
. "$(dirname "$0")/../lib/netns.sh"
fail=0
tmp=$(mktemp -d /tmp/urxe-rdmacm-err.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
"$1" || fail=1
"$1" || { echo "FAIL: second run (a new CM service after the first was killed)"; fail=1; }

# The client killed with SIGKILL mid-run: its connection outlives it in the service, which disconnects it,
# so the server's rping gets DISCONNECTED and exits 0 at once rather than waiting forever.
timeout 20 rping -s -a 10.77.0.1 -v >"$tmp/srv" 2>&1 &
srv=$!
# shellcheck disable=SC2317  # called through netns_wait_for
listening() { "$URXE_DEVCTL" cm show 2>/dev/null | grep -q "state LISTEN" || ! kill -0 "$srv" 2>/dev/null; }
if ! netns_wait_for 10 listening || ! kill -0 $srv 2>/dev/null; then
  echo "FAIL: rping -s: no listening id in the CM service after 10 s (or it exited)"; fail=1
fi
rping -c -a 10.77.0.1 -v >"$tmp/cli" 2>&1 &
cli=$!
# Mid-run: the server has pinged (its first lines of "ping data" are out: a few KB of its output, which a
# file gets in blocks).
# shellcheck disable=SC2317  # called through netns_wait_for
pinging() { grep -q "ping data" "$tmp/srv" || ! kill -0 "$cli" 2>/dev/null; }
if ! netns_wait_for 10 pinging || ! kill -0 $cli 2>/dev/null; then
  echo "FAIL: the rping client exited, or the server printed no ping data within 10 s"; fail=1
fi
kill -9 $cli
t0=$(date +%s.%N)
wait $srv
rc=$?
t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
if [ $rc -ne 0 ] || ! grep -q "ping data" "$tmp/srv" || [ "${t%.*}" -ge 5 ]; then
  echo "FAIL: rping server after its client's SIGKILL: exit $rc after $t s"; tail -5 "$tmp/srv"; fail=1
else
  echo "ok: rping server disconnected $t s after its client's SIGKILL"
fi
exit $fail
