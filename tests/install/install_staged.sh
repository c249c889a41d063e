#!/bin/sh
# `cmake --install` of the Release build into a staging directory (DESTDIR), then urxe used only from there:
#   - prefix /usr: the layout libibverbs expects (provider in its provider directory, /etc/libibverbs.d/
#     urxe.driver = "driver urxe") and nothing installed outside bin, lib, etc, share/doc, share/man;
#   - prefix /opt/urxe: the staged urxe finds the staged provider by itself (`urxe env`), also after the
#     tree is moved; the .driver line names the staged library and loads it without LD_PRELOAD
#     (RDMAV_DRIVERS, what the file does from /etc/libibverbs.d); ibv_rc_pingpong between two network
#     namespaces with `urxe link add` + `eval "$(urxe env)"` from the staged tree (tests/provider/apps_2ns.sh).
#   usage: install_staged.sh BUILD_DIR
set -u
build=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/netns.sh"
netns_require_root
command -v ibv_rc_pingpong >/dev/null || { echo "SKIP: ibv_rc_pingpong missing (apt-get install ibverbs-utils)"; exit 77; }
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
. "$here/../lib/check.sh"
mkdir -p /dev/infiniband
netns_tmpdir stage urxe-install-test || exit 1
unset URXE_PROVIDER LD_PRELOAD SYSFS_PATH

# --- prefix /usr: the Debian layout
if DESTDIR=$stage/usr-tree cmake --install "$build" --prefix /usr >"$stage/log" 2>&1; then
  ok "DESTDIR=... cmake --install --prefix /usr"
else
  bad "cmake --install --prefix /usr"; sed 's/^/    /' "$stage/log"
fi
t=$stage/usr-tree
[ -x "$t/usr/bin/urxe" ] && ok "usr/bin/urxe" || bad "usr/bin/urxe missing"
[ -f "$t/usr/lib/$arch/libibverbs/liburxe-rdmav34.so" ] && ok "provider in libibverbs' provider directory" ||
  bad "usr/lib/$arch/libibverbs/liburxe-rdmav34.so missing"
[ "$(cat "$t/etc/libibverbs.d/urxe.driver" 2>/dev/null)" = "driver urxe" ] && ok "/etc/libibverbs.d/urxe.driver: driver urxe" ||
  bad "etc/libibverbs.d/urxe.driver: '$(cat "$t/etc/libibverbs.d/urxe.driver" 2>&1)'"
[ -f "$t/usr/share/doc/urxe/README.md" ] && ok "docs in usr/share/doc/urxe" || bad "usr/share/doc/urxe/README.md missing"
[ -f "$t/usr/share/man/man1/urxe-stats.1.gz" ] && ok "man pages in usr/share/man/man1" || bad "urxe-stats.1.gz missing"
stray=$(cd "$t" && find . -type f |
  grep -vE "^\./(usr/bin|usr/lib/$arch/libibverbs|etc/libibverbs\.d|usr/share/doc/urxe)/|^\./usr/share/man/man1/urxe(-[a-z]+)?\.1\.gz$")
[ -z "$stray" ] && ok "nothing else installed" || bad "unexpected files: $stray"
# Installed binaries must not point into the build tree.
if readelf -d "$t/usr/bin/urxe" "$t/usr/lib/$arch/libibverbs/liburxe-rdmav34.so" | grep -qE 'R(UN)?PATH'; then
  bad "installed files keep an RPATH/RUNPATH"
else
  ok "no RPATH/RUNPATH in the installed files"
fi
out=$(URXE_RUN_DIR=$stage/none "$t/usr/bin/urxe" env 2>&1)
check "staged /usr urxe env names its own provider" "^export LD_PRELOAD='$t/usr/lib/$arch/libibverbs/liburxe-rdmav34.so'$" "$out"

# --- prefix /opt/urxe, then used from the staging directory only
if DESTDIR=$stage/opt-tree cmake --install "$build" --prefix /opt/urxe >"$stage/log" 2>&1; then
  ok "DESTDIR=... cmake --install --prefix /opt/urxe"
else
  bad "cmake --install --prefix /opt/urxe"; sed 's/^/    /' "$stage/log"
fi
p=$stage/opt-tree/opt/urxe
so=$p/lib/$arch/libibverbs/liburxe-rdmav34.so
[ -f "$so" ] && ok "opt/urxe/lib/$arch/libibverbs/liburxe-rdmav34.so" || bad "$so missing"
check "opt/urxe/etc/libibverbs.d/urxe.driver names the library under the prefix" \
  "^driver /opt/urxe/lib/$arch/libibverbs/liburxe$" "$(cat "$p/etc/libibverbs.d/urxe.driver" 2>&1)"
out=$(URXE_RUN_DIR=$stage/none "$p/bin/urxe" env 2>&1)
check "staged urxe env: the staged provider, not the build tree's" "^export LD_PRELOAD='$so'$" "$out"
out=$(URXE_RUN_DIR=$stage/none "$p/bin/urxe" env --driver 2>&1)
check "staged urxe env --driver: the staged library" "^driver $p/lib/$arch/libibverbs/liburxe$" "$out"
mv "$p" "$stage/moved"
p=$stage/moved
so=$p/lib/$arch/libibverbs/liburxe-rdmav34.so
out=$(URXE_RUN_DIR=$stage/none "$p/bin/urxe" env 2>&1)
check "after moving the installed tree, urxe env follows it" "^export LD_PRELOAD='$so'$" "$out"

# The staged .driver line, rewritten for where the tree now is, loads the provider without LD_PRELOAD:
# libibverbs takes RDMAV_DRIVERS entries exactly like .driver lines.
# In a network namespace of its own (tests/lib/netns.sh), urxe0 on a loop port.
drv=$(sed -n 's/^driver //p' "$p/etc/libibverbs.d/urxe.driver" | sed "s|^/opt/urxe|$p|")
a=urxeIA$$; b=urxeIB$$
netns_pair $a $b va vb 10.92.0.1/24 10.92.0.2/24 || exit 1
netns_urxe_side $a va "$stage/devices.out" "$p/bin/urxe" "" "--port loop" \
  env -u LD_PRELOAD RDMAV_DRIVERS="$drv" timeout 20 ibv_devices
out=$(cat "$stage/devices.out")
check "staged urxe link add + the .driver line's library: ibv_devices lists urxe0 (no LD_PRELOAD)" \
  "^[[:space:]]+urxe0[[:space:]]" "$out"

# ibv_rc_pingpong between two namespaces, devices and environment from the moved staged tree only (the
# provider argument of apps_2ns.sh is empty: URXE_PROVIDER unset in effect).
out=$(sh "$here/../provider/apps_2ns.sh" "$p/bin/urxe" "" "ibv_rc_pingpong -d urxe0 -g 1 -n 100" 2>&1); rc=$?
[ $rc = 0 ] && ok "ibv_rc_pingpong over urxe from the staged tree" || bad "ibv_rc_pingpong from the staged tree (exit $rc)"
printf '%s\n' "$out" | sed 's/^/    /'

[ $fail = 0 ] && echo "install_staged: all checks passed"
exit $fail
