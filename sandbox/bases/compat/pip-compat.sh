#!/bin/sh
# pip-compat.sh [install] MODE: run after every dpkg run of apt (`install` writes the apt.conf
# DPkg::Post-Invoke hook that does so, then runs once). Debian strips pip's RECORD from the Python
# packages it installs, so pip (without Debian's hands-off patch, dropped in pip 24.0+dfsg-1)
# refuses to replace them ("Cannot uninstall X, RECORD file not found ... installed by debian").
# This writes the RECORD (dist-info) / installed-files.txt (egg-info) that pip needs, so pip can
# replace those packages, for the packages the emulated image would not have under dpkg's control:
#   vendored: Ubuntu noble. Its python3-pip, python3-setuptools, python3-pkg-resources and
#             python3-wheel carry their dependencies vendored; Debian trixie's pull them in as
#             packages (typing_extensions, packaging, more_itertools, jaraco.*, ...). Those of
#             the list below that apt installed as dependencies (apt-mark showauto) get a RECORD;
#             one a task installs by name stays dpkg's, as on noble.
#   all:      every Debian Python package: the official python:* images' interpreter does not
#             see Debian's packages at all, so pip there never meets one it cannot replace.
set -u
if [ "${1:-}" = install ]; then
  printf 'DPkg::Post-Invoke { "sh %s %s || true"; };\n' "$(readlink -f "$0")" "$2" \
    > /etc/apt/apt.conf.d/90tmax-pip-compat
  shift
fi
mode=${1:-}
vendored='python3-typing-extensions python3-packaging python3-more-itertools python3-zipp
python3-jaraco.context python3-jaraco.functools python3-jaraco.text python3-autocommand
python3-inflect python3-typeguard python3-importlib-metadata python3-platformdirs'

case "$mode" in
  vendored) pkgs=$(apt-mark showauto $vendored 2>/dev/null) ;;
  all) pkgs=$(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' 'python3-*' 2>/dev/null |
                awk '$1 == "ii" {print $2}') ;;
  *) echo "usage: pip-compat.sh vendored|all" >&2; exit 2 ;;
esac

for pkg in $pkgs; do
  files=$(dpkg -L "$pkg" 2>/dev/null) || continue
  for meta in $(printf '%s\n' "$files" | grep -E '^/usr/lib/python3/dist-packages/[^/]+\.(dist|egg)-info$'); do
    [ -d "$meta" ] || continue
    site=${meta%/*}
    case "$meta" in
      *.dist-info)
        [ -e "$meta/RECORD" ] && continue
        { printf '%s\n' "$files" | while IFS= read -r f; do
            case "$f" in "$site"/*) [ -f "$f" ] && printf '%s,,\n' "${f#"$site"/}" ;; esac
          done
          printf '%s,,\n' "${meta#"$site"/}/RECORD"; } > "$meta/RECORD.tmp" &&
          mv "$meta/RECORD.tmp" "$meta/RECORD" ;;
      *.egg-info)
        [ -e "$meta/installed-files.txt" ] && continue
        { printf '%s\n' "$files" | while IFS= read -r f; do
            case "$f" in "$site"/*) [ -f "$f" ] && printf '../%s\n' "${f#"$site"/}" ;; esac
          done; } > "$meta/installed-files.txt.tmp" &&
          mv "$meta/installed-files.txt.tmp" "$meta/installed-files.txt" ;;
    esac
  done
done
exit 0
