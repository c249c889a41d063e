#!/bin/sh
# Both processes of each unmodified app in one network namespace on one urxe device (the first thing
# users try): server and client share urxe0 on va; the client connects to va's own address.
#   usage: apps_1ns.sh DEVCTL PROVIDER_SO "APP ARGS" ["APP ARGS" ...]
set -u
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
if [ "${URXE_IN_NETNS:-}" != 1 ]; then
  mkdir -p /dev/infiniband
  URXE_IN_NETNS=1 exec unshare --mount --net --propagation private "$0" "$@"
fi
devctl=$1; so=$2; shift 2
mount -t tmpfs urxe-test /dev/infiniband || exit 1
ip link set lo up
ip link add va type veth peer name vb
ip addr add 10.89.0.1/24 dev va
ip link set va up
ip link set vb up
tmp=$(mktemp -d /tmp/urxe-apps1.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
export URXE_RUN_DIR="$tmp/run" URXE_PROVIDER="$so"
"$devctl" link add urxe0 netdev va >/dev/null || exit 1
eval "$("$devctl" env)"
fail=0
for app in "$@"; do
  # shellcheck disable=SC2086
  timeout 60 $app >"$tmp/server" 2>&1 &
  srv=$!
  sleep 1
  # shellcheck disable=SC2086
  timeout 60 $app 10.89.0.1 >"$tmp/client" 2>&1
  crc=$?
  wait $srv
  src=$?
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    echo "FAIL: $app (server rc $src, client rc $crc)"
    sed 's/^/  server: /' "$tmp/server"
    sed 's/^/  client: /' "$tmp/client"
    fail=1
  else
    echo "ok: $app"
    grep -E "iters in|^ *[0-9]+ +[0-9]+ +[0-9.]+" "$tmp/client" | sed 's/^/  /'
  fi
done
exit $fail
