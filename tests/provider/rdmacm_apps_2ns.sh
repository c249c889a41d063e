#!/bin/sh
# Unmodified RDMA CM applications (rdmacm-utils) between two network namespaces joined by a veth pair, urxe0
# on each side (each side with its own mount namespace and run directory, so its own `urxe cm`, which the
# application's first open of /dev/infiniband/rdma_cm starts through the provider's UCMA shim). Server in ns
# A (10.88.0.1), client in ns B; both must exit 0. The services die with their namespaces.
#   usage: rdmacm_apps_2ns.sh DEVCTL PROVIDER_SO "SERVER CMD|CLIENT CMD" ...
#   (@SERVER@ in either command is the server's address)
set -u
. "$(dirname "$0")/../lib/netns.sh"
netns_require_root
devctl=$1; so=$2; shift 2
mkdir -p /dev/infiniband
a=urxeA$$; b=urxeB$$
netns_tmpdir tmp urxe-rdmacm || exit 1
netns_pair $a $b va vb 10.88.0.1/24 10.88.0.2/24 || exit 1
# One run directory per side for the whole script: every pair meets the same running services.
mkdir -p "$tmp/run_a" "$tmp/run_b"

fail=0
for pair in "$@"; do
  srv_cmd=$(printf '%s' "${pair%%|*}" | sed 's/@SERVER@/10.88.0.1/g')
  cli_cmd=$(printf '%s' "${pair#*|}" | sed 's/@SERVER@/10.88.0.1/g')
  # shellcheck disable=SC2086
  netns_urxe_side_in "$tmp/run_a" $a va "$tmp/server" "$devctl" "$so" "" $srv_cmd &
  srv=$!
  # No TCP port to watch: RDMA CM listens inside the service. The server is up well within a second.
  sleep 1.5
  # shellcheck disable=SC2086
  netns_urxe_side_in "$tmp/run_b" $b vb "$tmp/client" "$devctl" "$so" "" $cli_cmd
  crc=$?
  wait $srv
  src=$?
  if [ $src -eq 0 ] && [ $crc -eq 0 ]; then
    echo "PASS $srv_cmd | $cli_cmd"
  else
    fail=1
    echo "FAIL $srv_cmd (exit $src) | $cli_cmd (exit $crc)"
    sed 's/^/  server: /' "$tmp/server" | tail -20
    sed 's/^/  client: /' "$tmp/client" | tail -20
    for f in "$tmp"/run_?/cm/*.log; do [ -f "$f" ] && sed "s|^|  $(basename "$(dirname "$(dirname "$f")")"): |" "$f" | tail -20; done
  fi
done
exit $fail
