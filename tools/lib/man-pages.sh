#!/bin/sh
# Man pages from the help texts: urxe(1) from `urxe --help`, urxe-COMMAND(1) from `urxe COMMAND --help` for
# each command `urxe --help` lists, its NAME line from that list. The help text goes in as written (no-fill:
# its columns and examples stay as the terminal shows them); roff's escape character, leading dots and
# quotes, and hyphens (so options copy as ASCII minus) are escaped. Gzipped, as Debian ships man pages.
#   usage: man-pages.sh URXE OUTDIR
set -eu
urxe=$1 out=$2
version=$("$urxe" --version | sed -n '1s/^urxe //p')
mkdir -p "$out"
rm -f "$out"/*.1.gz

roff() {  # the text on stdin as roff source lines of a no-fill block
  sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\([.']\)/\\\\\&\1/"
}

page() {  # page NAME SUMMARY HELP_TEXT
  {
    printf '.TH %s 1 "" "urxe %s" "urxe manual"\n' "$(printf '%s' "$1" | tr 'a-z' 'A-Z')" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$(printf '%s' "$1" | roff)" "$(printf '%s' "$2" | roff)"
    printf '.SH SYNOPSIS\n.nf\n'
    # the usage lines: the first, and those after it that go on with "urxe" or an indented option list
    printf '%s\n' "$3" | awk 'NR == 1 { sub(/^usage: /, ""); print; next }
      /^ +(urxe |\[)/ { sub(/^       /, ""); print; next } { exit }' | roff
    printf '.fi\n.SH DESCRIPTION\n.nf\n'
    printf '%s\n' "$3" | awk 'NR == 1 { next } /^ +(urxe |\[)/ && !body { next } { body = 1; print }' | roff
    printf '.fi\n'
    [ "$1" = urxe ] || printf '.SH SEE ALSO\nurxe(1)\n'
  } | gzip -9n >"$out/$1.1.gz"
}

top=$("$urxe" --help)
page urxe "$(printf '%s\n' "$top" | sed -n '2s/^urxe - //p')" "$top"
printf '%s\n' "$top" | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print; next } on { exit }' |
  while read -r cmd summary; do
    page "urxe-$cmd" "$summary" "$("$urxe" "$cmd" --help)"
  done
