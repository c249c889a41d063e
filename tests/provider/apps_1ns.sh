#!/bin/sh
# Both processes of each unmodified app in one network namespace on one urxe device (the first thing
# users try): server and client share urxe0 on va; the client connects to va's own address.
#   usage: apps_1ns.sh DEVCTL PROVIDER_SO "APP ARGS" ["APP ARGS" ...]   (veth MTU: $URXE_TEST_MTU, default 1500)
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
netns_private "$0" "$@"
devctl=$1; so=$2; shift 2
netns_devfs || exit 1
netns_veth va vb 10.89.0.1/24 || exit 1
netns_wait_up va
netns_tmpdir tmp urxe-apps1 || exit 1
export URXE_RUN_DIR="$tmp/run" URXE_PROVIDER="$so"
"$devctl" link add urxe0 netdev va >/dev/null || exit 1
eval "$("$devctl" env)"
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

fail=0
t_all=$(now)
for app in "$@"; do
  t0=$(now)
  # shellcheck disable=SC2086
  timeout 60 $app >"$tmp/server" 2>&1 &
  srv=$!
  netns_wait_listen $srv  # the server listens on TCP 18515 (ibverbs-utils, perftest)
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
    echo "ok: $app ($(elapsed "$t0"))"
    grep -E "iters in|^ *[0-9]+ +[0-9]+ +[0-9.]+" "$tmp/client" | sed 's/^/  /'
  fi
done
echo "$# apps in $(elapsed "$t_all")"
exit $fail
