#!/bin/bash
# urxe-cpio.sh URXE PROVIDER OUT - pack urxe for the rxe peer guest as an extra newc cpio archive, to be
# unpacked after the guest's own initramfs (start-peer.sh: EXTRA_INITRD=OUT). The base guest stays as
# build-guest.sh made it.
#
# Contents, all under /opt/urxe:
#   bin/urxe                  the urxe command (URXE)
#   lib/liburxe-rdmav34.so    the provider (PROVIDER)
#   lib/*                     the shared libraries of both (ldd) that the guest does not carry itself (DPDK's
#                             librte_*, libstdc++, libnuma, libisal, ...): the guest is Debian 12 like the host
#                             this runs on, so the host's files fit
#   env                       '. /opt/urxe/env' sets PATH, LD_LIBRARY_PATH and URXE_PROVIDER
# Libraries the guest has (by file name, anywhere in its initramfs) are left out, so the guest's own
# libibverbs, libnl and libc stay the only copies.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/rxe-env.sh"
[[ $# -eq 3 ]] || { echo "usage: $0 URXE PROVIDER OUT.cpio" >&2; exit 2; }
urxe=$1 prov=$2 out=$3
[[ -x $urxe && -f $prov ]] || { echo "urxe-cpio: $urxe or $prov missing" >&2; exit 1; }
[[ -f $GUEST_DIR/initrd.img ]] || { echo "urxe-cpio: no guest in $GUEST_DIR: run build-guest.sh first" >&2; exit 1; }
command -v cpio >/dev/null || { echo "urxe-cpio: cpio not found (apt-get install cpio)" >&2; exit 1; }

tree=$(mktemp -d /tmp/urxe-cpio.XXXXXX)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/opt/urxe/bin" "$tree/opt/urxe/lib"
cp -L "$urxe" "$tree/opt/urxe/bin/urxe"
cp -L "$prov" "$tree/opt/urxe/lib/liburxe-rdmav34.so"

# file names the guest already has
cpio -it --quiet <"$GUEST_DIR/initrd.img" | sed 's|.*/||' | sort -u >"$tree/guest-files"
missing=0
while read -r name path; do
  if [[ $path == "not" ]]; then
    echo "urxe-cpio: $name not found on this host (ldd)" >&2
    missing=1
    continue
  fi
  grep -qxF "$name" "$tree/guest-files" && continue
  cp -L "$path" "$tree/opt/urxe/lib/$name"
done < <(ldd "$urxe" "$prov" | awk '$2 == "=>" && $3 != "" {print $1, $3}' | sort -u)
((missing == 0)) || exit 1
rm -f "$tree/guest-files"

cat >"$tree/opt/urxe/env" <<'ENV'
export PATH=/opt/urxe/bin:$PATH
export LD_LIBRARY_PATH=/opt/urxe/lib
export URXE_PROVIDER=/opt/urxe/lib/liburxe-rdmav34.so
ENV

(cd "$tree" && find opt | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$out.tmp"
mv "$out.tmp" "$out"
echo "urxe-cpio: $out: $(find "$tree/opt/urxe/lib" -type f | wc -l) libraries, $(du -h "$out" | cut -f1)"
