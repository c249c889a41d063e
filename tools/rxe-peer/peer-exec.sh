#!/bin/bash
# peer-exec.sh N 'shell command' - run a command inside peer N (as root, cwd /root,
# /bin/sh = dash), stream its stdout+stderr, and exit with its exit status
# (255 if the control connection failed).
# Long-running servers: peer-exec.sh 1 'bgrun /tmp/srv.log ib_write_bw -d rxe0'
# (bgrun detaches, prints the PID; read the log later with cat).
# Callers bound it with timeout(1).
# Protocol (for other programs): connect to 127.0.0.1:(7700+N) inside netns
# $NETNS, send ONE line (the command), keep the write side open, read until
# EOF; the last line is __RC__=<exit status>.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/rxe-env.sh"
[[ $# -ge 2 ]] || { echo "usage: $0 N 'command'" >&2; exit 2; }
n=$1; shift
port=$(cat "$(peer_dir "$n")/ctl.port") || exit 255
rc=255
# STDIO,ignoreeof: do not send FIN after the command line (see agent in build-guest.sh)
while IFS= read -r line || [[ -n $line ]]; do
  if [[ $line == __RC__=* ]]; then rc=${line#__RC__=}; else printf '%s\n' "$line"; fi
done < <(printf '%s\n' "$*" | ip netns exec "$NETNS" socat -t 0.5 STDIO,ignoreeof "TCP:127.0.0.1:$port")
exit "$rc"
