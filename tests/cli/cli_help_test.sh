#!/bin/sh
# Every `urxe` command's --help, found by walking `urxe --help` and each command's own command list (so a
# new command is checked without being named here): exit 0, text on stdout in the shape tools/command.h
# describes (usage line, an examples section with an urxe command line, exit status), every --option of
# the usage line documented on a line of its own, every option the command accepts documented (the
# "(valid: ...)" list of its unknown-option error), and no documented option rejected as unknown.
# Needs no root: nothing is created (options run without values, or against an empty URXE_RUN_DIR).
#   usage: cli_help_test.sh URXE
set -u
U=$1
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
tmp=$(mktemp -d /tmp/urxe-help-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export URXE_RUN_DIR=$tmp/run
unset URXE_PROVIDER

# Positional arguments a command needs before options are parsed; they name nothing that exists, so the
# command fails after its option checks instead of acting.
min_args() {
  case $1 in
    "link add") echo "urxe-help-test netdev urxe-nosuch0" ;;
    "pcap decode" | "pcap plot") echo "$tmp/nosuch.pcap" ;;
    *) echo "" ;;
  esac
}

# commands PREFIX: the names listed under "commands:" in `urxe PREFIX --help`.
commands() {
  # shellcheck disable=SC2086
  "$U" $1 --help 2>/dev/null | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}'
}

leaves=""
top=$(commands "")
[ -n "$top" ] && ok "urxe --help lists commands: $(echo $top)" || bad "urxe --help lists no commands"
for c in $top; do
  subs=$(commands "$c")
  if [ -n "$subs" ]; then
    for s in $subs; do leaves="$leaves|$c $s"; done
  else
    leaves="$leaves|$c"
  fi
done

out=$("$U" --help); rc=$?
[ $rc = 0 ] && ok "urxe --help exits 0" || bad "urxe --help exits $rc"
for want in "^examples" "^environment:" "URXE_RUN_DIR" "URXE_PROVIDER" "SYSFS_PATH"; do
  printf '%s\n' "$out" | grep -qE "$want" && ok "urxe --help mentions $want" || bad "urxe --help lacks $want"
done
printf '%s\n' "$("$U" --version)" | grep -qE '^urxe [0-9]+\.[0-9]+' && ok "urxe --version" || bad "urxe --version"
"$U" >/dev/null 2>&1; rc=$?
[ $rc = 2 ] && ok "bare urxe is a usage error (exit 2)" || bad "bare urxe exits $rc, want 2"
out=$("$U" nosuchcmd 2>&1); rc=$?
[ $rc = 2 ] && printf '%s\n' "$out" | grep -q "unknown command 'nosuchcmd' (valid: " &&
  ok "unknown command: exit 2, lists the valid ones" || bad "unknown command: exit $rc: $out"

IFS='|'
for cmd in $leaves; do
  [ -n "$cmd" ] || continue
  unset IFS
  # shellcheck disable=SC2086
  help=$("$U" $cmd --help 2>"$tmp/err"); rc=$?
  [ $rc = 0 ] || bad "urxe $cmd --help exits $rc"
  [ -s "$tmp/err" ] && bad "urxe $cmd --help writes to stderr: $(cat "$tmp/err")"
  # shellcheck disable=SC2086
  for form in "-h" "help"; do
    [ "$("$U" $cmd $form 2>&1)" = "$help" ] || bad "urxe $cmd $form differs from --help"
  done
  # Anywhere in the arguments, also after an option the command does not know.
  # shellcheck disable=SC2086
  [ "$("$U" $cmd $(min_args "$cmd") --urxe-no-such-option -h 2>&1)" = "$help" ] ||
    bad "urxe $cmd ARGS --urxe-no-such-option -h is not the help"
  printf '%s\n' "$help" | head -1 | grep -q "^usage: urxe $cmd" || bad "urxe $cmd --help: first line is not 'usage: urxe $cmd ...'"
  printf '%s\n' "$help" | grep -q "^exit status:" || bad "urxe $cmd --help: no 'exit status:'"
  printf '%s\n' "$help" | awk '/^examples:/ {on = 1; next} on && /^  .*urxe / {found = 1} on && /^$/ {exit} END {exit !found}' ||
    bad "urxe $cmd --help: no 'examples:' section with an urxe command line"
  # The usage line(s): the first line and its indented continuations.
  usage=$(printf '%s\n' "$help" | awk 'NR == 1 {print; next} /^      / && !body {print; next} {body = 1}')
  body=$(printf '%s\n' "$help" | sed 1d)
  opts=$(printf '%s\n' "$usage" | grep -oE -- '(^|[[ |])--?[a-zA-Z][a-zA-Z0-9-]*' | sed 's/^[[ |]//' | sort -u)
  documented=1
  for o in $opts; do
    printf '%s\n' "$body" | grep -qE -- "^ +(-[a-zA-Z], )?$o( |,|$)|^ +-[a-zA-Z], $o( |$)" ||
      { bad "urxe $cmd: $o is in the usage line but has no line of its own in --help"; documented=0; }
  done
  # Options the parser names as valid must be documented.
  # shellcheck disable=SC2086
  err=$(timeout 5 "$U" $cmd $(min_args "$cmd") --urxe-no-such-option </dev/null 2>&1)
  valid=$(printf '%s\n' "$err" | sed -n 's/.*(valid: \([^)]*\)).*/\1/p' | tr -d ',')
  for o in $valid; do
    printf '%s\n' "$help" | grep -qE -- "(^|[^a-z-])$o([^a-z-]|$)" ||
      { bad "urxe $cmd accepts $o (its error says so) but --help does not document it"; documented=0; }
  done
  printf '%s\n' "$err" | grep -qiE "unknown (option|argument)|too many|usage" ||
    bad "urxe $cmd --urxe-no-such-option is not reported as a usage error: $err"
  # Documented options must not be rejected as unknown (run without a value; nothing exists to act on).
  for o in $opts; do
    # shellcheck disable=SC2086
    e=$(timeout 3 "$U" $cmd $(min_args "$cmd") "$o" </dev/null 2>&1)
    printf '%s\n' "$e" | grep -qE "unknown (option|argument) '$o'" &&
      { bad "urxe $cmd documents $o but rejects it as unknown"; documented=0; }
  done
  [ $documented = 1 ] && ok "urxe $cmd --help: usage, examples, exit status; options documented: $(echo $opts)"
  IFS='|'
done
unset IFS

[ $fail = 0 ] && echo "cli_help_test: all checks passed"
exit $fail
