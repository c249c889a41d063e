#!/bin/sh
# Inside in_netns.sh: rdma-core's own pyverbs test suite (python3-pyverbs; shipped compressed under
# /usr/share/doc/rdma-core/tests) against urxe0. Prints pass/skip/fail counts; fails if any test fails, or
# if fewer than $URXE_PYVERBS_MIN_OK passed (required: the count the suite reaches on urxe, so a test that
# stops passing, by turning into a skip, fails the run). Arguments: test names for run_tests.py (default
# all of them).
set -u
: "${URXE_PYVERBS_MIN_OK:?set it to the ok count the suite reaches}"
src=/usr/share/doc/rdma-core/tests
[ -f "$src/run_tests.py" ] || { echo "SKIP: python3-pyverbs tests not installed"; exit 77; }
work=$(mktemp -d /tmp/urxe-pyverbs.XXXXXX)
# Its huge-page tests (ODP, parent domains, MRs over MAP_HUGETLB memory) need 2 MiB pages set aside, which
# a machine has none of by default: a few for the run (root only), given back after it.
huge=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
huge0=""
if [ -w "$huge" ] && [ "$(cat "$huge")" = 0 ]; then
  huge0=0
  echo 32 >"$huge" 2>/dev/null
  echo "2 MiB huge pages for the run: $(cat "$huge")"
fi
trap 'rm -rf "$work"; [ -z "$huge0" ] || echo "$huge0" >"$huge"' EXIT
mkdir "$work/tests"
cp -r "$src"/* "$work/tests/"
gunzip -f "$work"/tests/*.gz
cd "$work/tests" || exit 1
# Debian's python3 (pyverbs is built for it), not whatever python3 is first on PATH.
timeout 900 /usr/bin/python3 run_tests.py --dev urxe0 --gid 1 -v "$@" >"$work/out" 2>&1
rc=$?
ok=$(grep -cE '\.\.\. ok$|^ok$' "$work/out")
skip=$(grep -cE "\.\.\. skipped|^skipped " "$work/out")
fail=$(grep -cE '^(FAIL|ERROR):' "$work/out")
grep -E '^(FAIL|ERROR):' "$work/out"
echo "why tests skipped (count, reason):"
grep -oE "skipped ['\"].*['\"]$" "$work/out" | sed -E 's/^skipped .(.*).$/\1/; s/[0-9]+/N/g' | sort | uniq -c | sort -rn
tail -3 "$work/out"
echo "pyverbs suite on urxe0: ok=$ok skipped=$skip failed=$fail (rc $rc)"
[ $rc -eq 0 ] && [ "$ok" -ge "$URXE_PYVERBS_MIN_OK" ]
