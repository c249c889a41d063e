#!/bin/sh
# Runs an oracle script with Debian's python (the one with python3-scapy); fails loudly when it is missing.
py="$1"
shift
if [ ! -x "$py" ]; then
  echo "FAIL: $py not found; install the packages in tools/apt-packages.txt (python3-scapy, tshark)" >&2
  exit 1
fi
exec "$py" "$@"
