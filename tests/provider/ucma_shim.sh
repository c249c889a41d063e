#!/bin/sh
# Runs ucma_shim_test (under in_netns.sh: the namespace, urxe0 and the app environment are set up) and stops
# the CM service the shim started, which would otherwise outlive the test and its namespace.
#   usage: ucma_shim.sh CMD [ARGS...]
set -u
stop_services() {
  for f in "$URXE_RUN_DIR"/cm/*.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  return 0
}
trap stop_services EXIT
"$@"
