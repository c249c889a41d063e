# Shared helpers for tools/test, tools/demo and tools/bench (sourced, not run).
# Environment knobs: URXE_BUILD_DIR (default build; the sanitizer and fuzz builds use $URXE_BUILD_DIR-asan and
# $URXE_BUILD_DIR-fuzz), URXE_JOBS (default 2).

URXE_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
URXE_BUILD_DIR=${URXE_BUILD_DIR:-build}
case $URXE_BUILD_DIR in /*) ;; *) URXE_BUILD_DIR=$URXE_TOP/$URXE_BUILD_DIR ;; esac
URXE_JOBS=${URXE_JOBS:-2}

say() { printf '\n== %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Installs the packages of tools/apt-packages.txt (--demo: those before its "# -- tools/demo stops here"
# line, what building urxe and the demo need; or the PKGs named) that are missing; does nothing (no
# apt-get update) when everything is there, so reruns are fast.
install_missing_packages() {  # install_missing_packages [--demo | PKG...]
  local missing=() p pkgs=() demo=0
  if [ "${1:-}" = --demo ]; then demo=1; shift; fi
  pkgs=("$@")
  command -v dpkg-query >/dev/null || { echo "dpkg-query not found: not Debian? skipping package check"; return 0; }
  # the list file's lines, less comments and blanks (a process substitution here lost its /dev/fd path
  # in a script run from nohup)
  if [ $# -eq 0 ]; then
    while read -r p; do
      [ $demo = 1 ] && [ "${p#"# -- tools/demo stops here"}" != "$p" ] && break
      p=${p%%#*}
      p=${p//[[:space:]]/}
      [ -n "$p" ] && pkgs+=("$p")
    done <"$URXE_TOP/tools/apt-packages.txt"
  fi
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing missing packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo; install: apt-get install ${missing[*]}"
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q || die "apt-get update failed"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    </dev/null || die "apt-get install failed"
}

# configure DIR [cmake args...]: keeps the generator an existing build dir was made with; otherwise Ninja
# when available, else Unix Makefiles.
configure() {
  local dir=$1 gen
  shift
  if [ -f "$dir/CMakeCache.txt" ]; then
    gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$dir/CMakeCache.txt")
  elif command -v ninja >/dev/null; then
    gen=Ninja
  else
    gen="Unix Makefiles"
  fi
  cmake -S "$URXE_TOP" -B "$dir" -G "$gen" "$@"
}

# build DIR [targets...]: keeps going past a failed target (so one broken target does not hide the rest),
# and still fails at the end.
build() {
  local dir=$1
  shift
  local targets=() keep=(-k)
  [ $# -gt 0 ] && targets=(--target "$@")
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$dir/CMakeCache.txt" 2>/dev/null && keep=(-k 0)
  cmake --build "$dir" -j "$URXE_JOBS" "${targets[@]}" -- "${keep[@]}"
}

# The Release build everything else uses (tools/demo, tools/bench and the first stage of tools/test).
configure_release() {
  configure "$URXE_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DURXE_WERROR=ON -DURXE_TESTS=ON -DURXE_BENCH=ON "$@"
}

# Whether GoogleTest is installed: tools/demo builds without the tests when it is not (it installs only
# what building urxe needs).
have_gtest() {
  dpkg-query -W -f='${Status}' libgtest-dev 2>/dev/null | grep -q 'install ok installed'
}
