#!/bin/sh
# unmanaged.sh: diverts Debian's EXTERNALLY-MANAGED marker(s) away (dpkg keeps them diverted on
# upgrades), for images whose Python has none: Ubuntu jammy (before PEP 668) and the official
# python:* images. pip and `uv pip install --system` then install without --break-system-packages.
set -eu
for f in /usr/lib/python3*/EXTERNALLY-MANAGED; do
  [ -e "$f" ] || continue
  dpkg-divert --local --rename --divert "$f.tmax-off" --add "$f"
done
