#!/bin/sh
# Unmodified RDMA CM applications (rdmacm-utils, perftest -R) over urxe, through the provider's UCMA shim and
# the CM service `urxe cm` it starts on the first open of /dev/infiniband/rdma_cm.
#   2ns: two namespaces joined by a veth (va in A, vb in B), urxe0 on each side, each side with its own run
#        directory and so its own service. URXE_TEST_CLIENT_PRIV: a prefix for the client side's commands,
#        e.g. setpriv to uid 65534 with only CAP_NET_RAW (what an unprivileged app needs for its packet
#        socket), so the service it starts is unprivileged too; its run directory then belongs to uid 65534.
#   1ns: server and client on one urxe0 in one namespace and one run directory: one service serves both.
# Each side's run directory stays for the whole script: every pair meets the same running services.
#   usage: rdmacm_apps.sh 2ns|1ns URXE PROVIDER_SO "SERVER CMD|CLIENT CMD" ...
# In either command @S4@ is the server's IPv4 address, @S6@ its IPv6 ULA, @SLL@ its link-local address with
# the scope id of the server's interface and @CLL@ the same address with the client's interface as scope.
# A server command that starts with @DAEMON@ serves until it is stopped (UCX's io_demo): once its client has
# exited 0 it must still be running, and is then stopped with SIGTERM. Every pair must also have reached the
# server side's CM service: it counts at least one more REQ or SIDR_REQ received than before the pair.
set -u
. "$(dirname "$0")/../lib/netns.sh"
. "$(dirname "$0")/../lib/check.sh"
netns_require_root
mode=$1 urxe=$2 so=$3
shift 3
mkdir -p /dev/infiniband
a=cmA$$ b=cmB$$
netns_tmpdir tmp urxe-rdmacm || exit 1
netns_pair $a $b va vb 10.88.0.1/24 10.88.0.2/24 || exit 1
ip -n $a addr add fd88::1/64 dev va nodad || exit 1
ip -n $b addr add fd88::2/64 dev vb nodad || exit 1
# The link-local addresses appear once DAD is over (about a second after the link came up): wait, so the
# GID tables do not change under the apps.
i=0
while [ $i -lt 100 ]; do
  ll=$(ip -n $a -6 -o addr show dev va scope link | awk '!/tentative/ { sub("/.*", "", $4); print $4 }')
  [ -n "$ll" ] && ip -n $b -6 -o addr show dev vb scope link | grep -qv tentative && break
  sleep 0.1
  i=$((i + 1))
done
[ -n "$ll" ] || { echo "FAIL: no link-local address on va"; exit 1; }
mkdir -p "$tmp/run_a" "$tmp/run_b"
chmod 755 "$tmp/run_a"
if [ "$mode" = 1ns ]; then
  cns=$a cif=va crun=$tmp/run_a cpriv=""
else
  cns=$b cif=vb crun=$tmp/run_b
  cpriv=${URXE_TEST_CLIENT_PRIV:-}
fi
# The client side's device is made by root before its first app (urxe link add), the rest by the app.
netns_urxe_side_in "$crun" $cns $cif "$tmp/client" "$urxe" "$so" "" true || { echo "FAIL: urxe0 on $cif"; exit 1; }
# The client's run directory stays root's, as /run/urxe after `urxe link add`: an unprivileged client only
# traverses it, and the service it starts works in the sticky, world-writable cm/ that link add made.
[ -z "$cpriv" ] || chmod 755 "$crun"

subst() {
  printf '%s' "$1" | sed -e "s/@S4@/10.88.0.1/g" -e "s/@S6@/fd88::1/g" -e "s/@SLL@/$ll%va/g" -e "s/@CLL@/$ll%$cif/g"
}
now() { date +%s.%N; }
cm_show() { ip netns exec $a env URXE_RUN_DIR="$tmp/run_a" "$urxe" cm show 2>/dev/null; }
# The server is ready: its service has a listening id, or it listens on a TCP port first (fi_pingpong takes
# its control connection before it listens through RDMA CM).
listening() {
  cm_show | grep -q "state LISTEN" || [ -n "$(ip netns exec $a ss -Hltn 2>/dev/null)" ]
}
requests_received() {  # REQ + SIDR_REQ received by the server side's service so far (0 before it runs)
  cm_show | awk '$1 == "REQ" || $1 == "SIDR_REQ" { n += $3 } END { print n + 0 }'
}
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

stop_server() {  # SIGTERM to the server app: the first word of its command that is not env or VAR=value
  comm=$(for w in $srv_cmd; do case $w in *=* | env) ;; *) printf '%.15s' "$w"; break ;; esac; done)
  for p in $(ip netns pids $a); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$comm" ] && kill "$p"
  done
}

fail=0
t_all=$(now)
for pair in "$@"; do
  t0=$(now)
  srv_cmd=$(subst "${pair%%|*}")
  cli_cmd=$(subst "${pair#*|}")
  daemon=0
  case $srv_cmd in @DAEMON@*) daemon=1 srv_cmd=${srv_cmd#@DAEMON@} ;; esac
  # A failure that is the application's own race (known_app_race, tests/lib/check.sh: perftest -R's and
  # qperf's REJ 8 from a server not yet listening, rping's exit race, perftest's clock calibration) gets up
  # to four more tries, each reported as RETRY so it stays visible.
  for try in 1 2 3 4 5; do
    # The previous server's listener goes when the service has seen its close: wait for that first, or its
    # listener would pass for this server's (seen: the client's REQ came before the new server listened).
    i=0
    while [ $i -lt 50 ] && listening; do
      sleep 0.05
      i=$((i + 1))
    done
    # shellcheck disable=SC2086
    netns_urxe_side_in "$tmp/run_a" $a va "$tmp/server" "$urxe" "$so" "" $srv_cmd &
    srv=$!
    # RDMA CM listens inside the service, which `urxe cm show` asks (a fixed sleep lost the race on a loaded
    # machine: the client's REQ met no listener, REJ 8); or the app's own TCP port. At most 10 s.
    i=0
    while [ $i -lt 100 ] && kill -0 $srv 2>/dev/null; do
      listening && break
      sleep 0.1
      i=$((i + 1))
    done
    reqs0=$(requests_received)
    log0=$(cat "$tmp"/run_a/cm/*.log 2>/dev/null | wc -l)
    # shellcheck disable=SC2086
    netns_urxe_side_in "$crun" $cns $cif "$tmp/client" "$urxe" "$so" "" $cpriv $cli_cmd
    crc=$?
    # A failed client leaves the server waiting for it until its timeout: stop it now.
    if [ $crc -ne 0 ]; then
      stop_server
    fi
    if [ $daemon = 1 ] && [ $crc -eq 0 ]; then
      # Still serving after its client is done, then stopped (urxe run passes SIGTERM on to the app).
      if kill -0 $srv 2>/dev/null; then
        stop_server
        wait $srv
        src=0
      else
        wait $srv
        src=$?
        echo "  the server exited before it was stopped (exit $src)"
        [ $src -ne 0 ] || src=1
      fi
    else
      wait $srv
      src=$?
    fi
    [ $src -eq 0 ] && [ $crc -eq 0 ] && ok=1 || ok=0
    why=""
    # The server side's CM service log lines of this try (which tell a REJ 8's cause).
    cat "$tmp"/run_a/cm/*.log 2>/dev/null | tail -n +$((log0 + 1)) >"$tmp/cm_try.log"
    [ "$ok" = 1 ] || why=$(known_app_race "$tmp/server" "$tmp/client" "$tmp/cm_try.log")
    [ -z "$why" ] || [ $try = 5 ] && break
    echo "RETRY: $srv_cmd | $cli_cmd: $why"
  done
  reqs=$(requests_received)
  if [ "$ok" = 1 ] && [ "$reqs" -le "$reqs0" ]; then
    ok=0
    echo "  no connection request reached the server side's CM service (REQ + SIDR_REQ received: $reqs0 -> $reqs)"
  fi
  if [ "$ok" = 1 ]; then
    echo "ok: $srv_cmd | $cli_cmd ($(elapsed "$t0"))"
  else
    fail=1
    echo "FAIL: $srv_cmd (exit $src) | $cli_cmd (exit $crc)"
    sed 's/^/  server: /' "$tmp/server" | tail -60
    sed 's/^/  client: /' "$tmp/client" | tail -60
    for f in "$tmp"/run_?/cm/*.log; do [ -f "$f" ] && sed "s|^|  $(basename "$(dirname "$(dirname "$f")")"): |" "$f" | tail -20; done
  fi
done
# The client side's service keeps its device's CM counters where the kernel has them (sysfs ports/1/cm_*,
# mirrored once a second), also one that an unprivileged client started in a run directory root made: its
# REQs and SIDR_REQs sent show there.
cm_sent() {
  _cs=$crun/sys/class/infiniband/urxe0/ports/1/cm_tx_msgs
  echo $(($(cat "$_cs/req" 2>/dev/null || echo 0) + $(cat "$_cs/sidr_req" 2>/dev/null || echo 0)))
}
i=0
while [ $i -lt 30 ] && [ "$(cm_sent)" -eq 0 ]; do
  sleep 0.1
  i=$((i + 1))
done
if [ "$(cm_sent)" -gt 0 ]; then
  echo "ok: the client side's sysfs CM counters: $(cm_sent) REQ + SIDR_REQ sent"
else
  echo "FAIL: the client side's sysfs CM counters show no REQ or SIDR_REQ sent"
  for f in "$tmp"/run_?/cm/*.log; do [ -f "$f" ] && grep "CM counters" "$f" | sed 's/^/  /'; done
  fail=1
fi
echo "$# pairs in $(elapsed "$t_all")"
exit $fail
