#!/bin/sh
# Regenerates pcap-fixtures/interop/: boots the kernel-rxe QEMU peer (tools/rxe-peer), runs the "fixtures"
# group of tests/interop/interop.py (urxe on the host <-> kernel rxe in the guest, every run captured on the
# guest's tap), copies each passed run's capture here as interop-<case>.pcap and writes
# interop-PROVENANCE.md (commands, roles, MACs/IPs, MTU, netem, QPNs/PSNs/rkeys/VAs as printed), then stops
# the peer. As root; ~3-6 min on 2 cores (guest boot 12-40 s, cached guest image).
#   usage: make-fixtures.sh BUILD_DIR      (a build with the urxe, urxe_provider and interop_rdma_check targets)
set -eu
build=$(cd "${1:?usage: make-fixtures.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
results=$(mktemp -d /tmp/urxe-fixtures.XXXXXX)
export URXE_BIN="$build/tools/urxe" URXE_INTEROP_RDMA_CHECK="$build/tests/interop/interop_rdma_check"
export URXE_INTEROP_RESULTS="$results" URXE_INTEROP_REQUIRED=1
py="/usr/bin/python3 $top/tests/interop/interop.py"
$py setup
rc=0
$py run fixtures || rc=$?
$py teardown || true
rm -f "$here"/interop-*.pcap
$py fixtures "$here"
echo "results of the runs: $results (run status $rc)"
exit $rc
