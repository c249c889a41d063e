#!/bin/sh
# The Debian package: cpack builds urxe_<version>_<arch>.deb from the Release build, then
#   1. dpkg-deb: control fields (Depends from dpkg-shlibdeps: libibverbs1, DPDK, libpcap), no conffiles and
#      no maintainer scripts, and exactly the expected files at their Debian paths (a man page per command);
#   2. a real `dpkg -i` + `dpkg -r`, made safe on a shared machine: in a private mount namespace whose /usr,
#      /etc and /var are overlayfs mounts with upper directories in a temp dir, so every write dpkg makes
#      lands there and vanishes with the namespace. Between install and removal: the installed urxe creates
#      a device (its own network namespace), libibverbs loads the provider through /etc/libibverbs.d/
#      urxe.driver alone (no LD_PRELOAD), `urxe run -- ibv_devinfo` works, `man urxe-stats` shows its --help.
#      After `dpkg -r` the upper directories must hold nothing but directories that already existed: no file
#      is left behind.
# Exit 77 (after the dpkg-deb checks) when part 2 cannot run here (not root, no overlayfs).
#   usage: install_deb.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/check.sh"
. "$here/../lib/netns.sh"

if [ "${URXE_IN_OVERLAY:-}" = 1 ]; then
  # --- part 2, inside the private mount namespace (see below): $1 = build dir, $2 = .deb, $3 = work dir
  deb=$2; w=$3
  # Upper layers on a tmpfs: it can always be an overlay upper (/tmp may itself be overlayfs in a container).
  mkdir -p "$w/ov" && mount -t tmpfs -o size=512m urxe-deb-upper "$w/ov" || exit 1
  for d in usr etc var; do
    mkdir -p "$w/ov/$d.up" "$w/ov/$d.work"
    mount -t overlay "urxe-deb-$d" -o "lowerdir=/$d,upperdir=$w/ov/$d.up,workdir=$w/ov/$d.work" "/$d" ||
      { echo "SKIP: cannot mount overlayfs on /$d"; exit 77; }
  done
  find /usr /etc -xdev -type d >"$w/dirs.before"
  if out=$(dpkg -i "$deb" 2>&1); then ok "dpkg -i"; else bad "dpkg -i"; printf '%s\n' "$out" | sed 's/^/    /'; fi
  check "dpkg -s urxe: installed" "^Status: install ok installed" "$(dpkg -s urxe 2>&1)"
  # man finds the pages; a page says what --help says
  out=$(MANWIDTH=200 MANPAGER=cat man urxe-stats 2>&1)
  check "man urxe-stats: its NAME line" "^ +urxe-stats - device counters" "$out"
  check "man urxe-stats: --help's text" "^ +--prometheus +the counters in Prometheus' text format" "$out"
  arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
  check "/usr/bin/urxe env names the installed provider" \
    "^export LD_PRELOAD='/usr/lib/$arch/libibverbs/liburxe-rdmav34.so'$" "$(URXE_RUN_DIR=$w/none /usr/bin/urxe env 2>&1)"
  # The installed urxe's device in a network namespace of its own (tests/lib/netns.sh), on a loop port.
  a=urxeDA$$; b=urxeDB$$
  netns_pair $a $b va vb 10.91.0.1/24 10.91.0.2/24 || exit 1
  netns_urxe_side $a va "$w/devices.out" /usr/bin/urxe "" "--port loop" sh -c '
    echo "== ibv_devices, SYSFS_PATH only"
    env -u LD_PRELOAD timeout 20 ibv_devices
    echo "== urxe run -- ibv_devinfo"
    timeout 20 /usr/bin/urxe run -- ibv_devinfo -d urxe0
    /usr/bin/urxe link del urxe0'
  out=$(cat "$w/devices.out")
  check "ibv_devices finds urxe0 through /etc/libibverbs.d/urxe.driver (no LD_PRELOAD)" \
    "^[[:space:]]+urxe0[[:space:]]+[0-9a-f]{16}" "$out"
  check "urxe run -- ibv_devinfo -d urxe0: port active" "state:[[:space:]]+PORT_ACTIVE" "$out"
  if out=$(dpkg -r urxe 2>&1); then ok "dpkg -r urxe"; else bad "dpkg -r urxe"; printf '%s\n' "$out" | sed 's/^/    /'; fi
  check "dpkg-query: urxe not installed (no config-files state)" "^not-installed$|no packages found" \
    "$(dpkg-query -W -f='${db:Status-Status}\n' urxe 2>&1)"
  # Anything but a directory in the upper layers of /usr and /etc is a leftover (or a deletion of a file
  # urxe does not own); so is a directory that did not exist before `dpkg -i`.
  left=$(cd "$w/ov" && find usr.up etc.up -mindepth 1 ! -type d)
  newdirs=$(cd "$w/ov" && find usr.up etc.up -mindepth 1 -type d | sed 's|^\([a-z]*\)\.up|/\1|' |
    grep -vxF -f "$w/dirs.before")
  [ -z "$left$newdirs" ] && ok "after dpkg -r nothing of urxe is left in /usr or /etc" ||
    bad "left behind after dpkg -r: $left $newdirs"
  [ $fail = 0 ] && echo "install_deb (dpkg -i/-r): all checks passed"
  exit $fail
fi

[ -d "$build/provider" ] && [ -x "$build/tools/urxe" ] || { echo "FAIL: $build has no urxe build"; exit 1; }
command -v dpkg-shlibdeps >/dev/null || { echo "SKIP: dpkg-shlibdeps missing (apt-get install dpkg-dev)"; exit 77; }
w=$(mktemp -d /tmp/urxe-deb-test.XXXXXX)
trap 'rm -rf "$w"' EXIT
if cpack -G DEB --config "$build/CPackConfig.cmake" -B "$w/pkg" >"$w/cpack.log" 2>&1; then
  ok "cpack -G DEB"
else
  bad "cpack -G DEB"; sed 's/^/    /' "$w/cpack.log"; exit 1
fi
deb=$(ls "$w"/pkg/urxe_*.deb 2>/dev/null)
[ -f "$deb" ] && ok "package: $(basename "$deb")" || { bad "no urxe_*.deb in $w/pkg"; exit 1; }

# --- 1. dpkg-deb
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
check "Package: urxe" "^urxe$" "$(dpkg-deb -f "$deb" Package)"
dep=$(dpkg-deb -f "$deb" Depends)
for want in 'libibverbs1 \(>= [0-9]+\)' 'librte-eal[0-9]+' 'librte-ethdev[0-9]+' 'libpcap0\.8' 'libstdc\+\+6'; do
  check "Depends: $want" "$want" "$dep"
done
members=$(dpkg-deb -I "$deb" | awk '/^ +[0-9]+ bytes, +[0-9]+ lines/ {print $NF}' | sort | tr '\n' ' ')
check "control members: control and md5sums only (no conffiles, no maintainer scripts)" "^control md5sums $" "$members"
files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort | tr '\n' ' ')
want="./etc/libibverbs.d/urxe.driver ./usr/bin/urxe ./usr/lib/$arch/libibverbs/liburxe-rdmav34.so "
check "contents: .driver, urxe, provider in libibverbs' directory" "^$want" "$files"
check "contents: docs in /usr/share/doc/urxe and man pages only besides" \
  "^$want(\./usr/share/doc/urxe/[^ ]+ )+(\./usr/share/man/man1/urxe(-[a-z]+)?\.1\.gz )+$" "$files"
# a man page for urxe and for each command its --help lists
cmds=$("$build/tools/urxe" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print "urxe-" $1; next } on { exit }')
want_man=$(printf '%s\n' urxe $cmds | sed 's|.*|./usr/share/man/man1/&.1.gz|' | sort | tr '\n' ' ')
got_man=$(printf '%s\n' $files | grep '^\./usr/share/man/' | sort | tr '\n' ' ')
[ "$got_man" = "$want_man" ] && ok "man pages: urxe(1) and one per command ($(printf '%s\n' $cmds | wc -l))" ||
  bad "man pages: $got_man, want $want_man"
dpkg-deb -x "$deb" "$w/x"
[ "$(cat "$w/x/etc/libibverbs.d/urxe.driver")" = "driver urxe" ] && ok "urxe.driver: driver urxe" ||
  bad "urxe.driver: '$(cat "$w/x/etc/libibverbs.d/urxe.driver")'"

# --- 2. real dpkg -i / dpkg -r inside overlays
if [ "$(id -u)" != 0 ]; then
  [ $fail = 0 ] || exit 1
  echo "SKIP: dpkg -i/-r part needs root (overlay mounts in a private mount namespace)"; exit 77
fi
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null
grep -qw overlay /proc/filesystems || { [ $fail = 0 ] || exit 1; echo "SKIP: no overlayfs for the dpkg -i/-r part"; exit 77; }
mkdir -p /dev/infiniband
URXE_IN_OVERLAY=1 timeout 120 unshare --mount --propagation private sh "$0" "$build" "$deb" "$w"
rc=$?
[ $rc = 0 ] && [ $fail = 0 ] && echo "install_deb: all checks passed"
[ $rc = 77 ] && [ $fail = 0 ] && exit 77
[ $rc = 0 ] && exit $fail
exit 1
