#!/bin/sh
# python-image.sh PIP-REQUIREMENT...: makes Debian's python3 behave like the official python:*
# images' interpreter for pip: pip (and, for 3.11, setuptools/wheel) installed by pip itself into
# /usr/local with RECORDs (so `pip install --upgrade pip` works, as there), Debian's python3-pip
# removed again, no EXTERNALLY-MANAGED marker, and every Debian Python package a task adds later
# replaceable by pip (pip-compat.sh all). Needs python3-pip installed when called.
set -eu
here=$(dirname "$(readlink -f "$0")")
python3 -m pip install -q --break-system-packages --ignore-installed --no-cache-dir \
  --no-warn-script-location "$@"
apt-get purge -y -q --auto-remove python3-pip
sh "$here/unmanaged.sh"
sh "$here/pip-compat.sh" install all
hash -r
pip --version
