# Sourced by the tests/cli, tests/install and tests/provider scripts: one line per check on stdout ("ok: ..." or
# "FAIL: ..."); any failure sets fail=1, which the script exits with.
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
check() {  # check DESCRIPTION PATTERN TEXT
  if printf '%s\n' "$3" | grep -qE -- "$2"; then ok "$1"; else bad "$1 (no /$2/ in:)"; printf '%s\n' "$3" | sed 's/^/    /'; fi
}
check_not() {  # check_not DESCRIPTION PATTERN TEXT
  if printf '%s\n' "$3" | grep -qE -- "$2"; then bad "$1 (/$2/ in:)"; printf '%s\n' "$3" | sed 's/^/    /'; else ok "$1"; fi
}
expect_rc() {  # expect_rc DESCRIPTION WANT GOT
  if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else bad "$1: exit $3, want $2"; fi
}
# known_app_race FILE...: from the outputs a failed run of an application pair left, why the failure is that
# application's own race, which another try answers (printed), or nothing. The callers retry such a pair and
# print the reason, so a repeat stays visible; any other failure fails.
# - perftest refuses to report when its calibration of the TSC against gettimeofday gives r^2 < 0.9 (the
#   process lost its CPU while it timed the clock, as when two tests share two CPUs), whatever its flags.
# - perftest -R's server listens again for its data connection right after a handshake on its control
#   connection, while its client resolves and connects: on a loaded machine the client's REQ now and then
#   comes first and is answered REJ 8, as the kernel answers it, and perftest's client then segfaults.
#   Debian 12's qperf (0.4.11) has the same race for every test: its server sends the client the port it
#   bound before it listens on it (fixed upstream after 0.4.11); its client then reports "unexpected event
#   from RDMA CM: Event rejected". Seen twice in a row with other tests running beside it. A REJ 8 passes for
#   this race only when the server side's CM service log lines of the try are among FILEs and say the REQ
#   came while no id listened on its port (cm/ib_cm.cc); a listener that failed to match gives no retry.
# - Debian 12's rping (rdma-core 44): its CM thread loops on rdma_get_cm_event while the main thread, once
#   the connection is down, destroys the id and closes the event channel without stopping that thread; a
#   thread that asks for its next event after the close prints "rdma_get_cm_event: Bad file descriptor" and
#   the process exits 255 after a run that passed (later rdma-core stops the thread first). It needs the
#   DISCONNECTED event to reach the thread just before the main thread closes: over the kernel the peer's
#   DREP comes from a softirq, well before a teardown that unpins memory; here from the peer's CM service,
#   on a loaded machine ~1 pair in 30 (two CPU hogs beside the nonroot rdmacm matrix). When the closed fd's
#   number was taken again meanwhile (an eventfd, which takes 8-byte writes only), the same late call says
#   "rdma_get_cm_event: Invalid argument".
known_app_race() {
  if grep -qs "Correlation coefficient r^2" "$@"; then
    echo "perftest's clock calibration refused to report: $(grep -hs -m1 "Correlation coefficient" "$@" | head -1)"
  elif grep -qs -e "RDMA_CM_EVENT_REJECTED; error: 8" -e "unexpected event from RDMA CM: Event rejected" "$@" &&
    grep -qs "refused (REJ 8): no id listens on the port" "$@" &&
    ! grep -qs "refused (REJ 8): ids listen on the port" "$@"; then
    echo "REJ 8 from a server not yet listening (its CM service: no id listened on the port)"
  elif grep -qs -e "rdma_get_cm_event: Bad file descriptor" -e "rdma_get_cm_event: Invalid argument" "$@"; then
    echo "rping's CM thread asked for an event after its main thread closed the channel"
  fi
}
check_captures() {  # check_captures URXE DIR MIN: at least MIN pcapng files in DIR, each passing decode --strict
  _cc_n=0
  for _cc_f in "$2"/*.pcapng; do
    [ -e "$_cc_f" ] || continue
    _cc_n=$((_cc_n + 1))
    if ! _cc_out=$("$1" pcap decode --strict "$_cc_f" 2>&1); then
      bad "urxe pcap decode --strict $(basename "$_cc_f")"
      printf '%s\n' "$_cc_out" | tail -3 | sed 's/^/    /'
    fi
  done
  if [ $_cc_n -ge "$3" ]; then ok "$_cc_n captures (a context each), every frame well-formed with a good ICRC"
  else bad "$_cc_n captures, want $3 at least"; fi
}
