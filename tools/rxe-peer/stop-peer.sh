#!/bin/bash
# stop-peer.sh N [N...] | --all [--teardown]
# Stops peer VMs started by start-peer.sh (QMP "quit", then SIGTERM/SIGKILL to the recorded QEMU PID only,
# and only after checking that this PID still is that peer's QEMU), removes their taps. --teardown also
# deletes the namespace (bridge and anything else in it) once no peer is left.
# PID verification, a lock, bounded waits.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/rxe-env.sh"
teardown=0
peers=()
for a in "$@"; do
  case $a in
    --all) for d in "$RUN_DIR"/peer*; do [[ -d $d ]] && peers+=("${d##*/peer}"); done ;;
    --teardown) teardown=1 ;;
    *) peers+=("$a") ;;
  esac
done

stop() {
  local n d pid i
  for n in "${peers[@]}"; do
    d=$(peer_dir "$n")
    if pid=$(peer_pid "$n"); then
      printf '{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n' |
        timeout 5 socat - "UNIX-CONNECT:$d/qmp.sock" >/dev/null 2>&1 || true
      for ((i = 0; i < 50; i++)); do peer_pid "$n" >/dev/null || break; sleep 0.1; done
      if peer_pid "$n" >/dev/null; then kill "$pid" 2>/dev/null; sleep 1; fi
      if peer_pid "$n" >/dev/null; then kill -9 "$pid" 2>/dev/null; sleep 0.2; fi
      echo "peer$n stopped (pid $pid)"
    fi
    rm -f "$d/qemu.pid" "$d/qmp.sock"
    ip -n "$NETNS" link del "$(peer_tap "$n")" 2>/dev/null || true
  done
  if ((teardown)); then
    local left=0
    for d in "$RUN_DIR"/peer*; do
      [[ -d $d ]] && peer_pid "${d##*/peer}" >/dev/null && left=$((left + 1))
    done
    if ((left == 0)); then
      ip netns del "$NETNS" 2>/dev/null && echo "netns $NETNS removed"
    else
      echo "netns $NETNS kept: $left peer(s) still running"
    fi
  fi
  return 0
}
with_lock stop
