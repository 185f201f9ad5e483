#!/bin/sh
# curl/wget stand-in of tmax_jax task images (sandbox/offline; see docs/design/task-images.md).
# URLs listed in urls.tsv (shell glob <TAB> local file) are served from the local copy, every use
# is logged to /tmp/.tmax-offline.log; anything else runs the real tool unchanged.
here=$(dirname "$(readlink -f "$0")")
tool=$(basename "$0")
real=/usr/bin/$tool
url="" out="" remote_name=0 prev=""
for a in "$@"; do
  case "$prev" in
    -o|--output|-O|--output-document) [ "$prev" = "-O" ] && [ "$tool" = curl ] || out=$a ;;
  esac
  case "$a" in
    http://*|https://*) [ -z "$url" ] && url=$a ;;
    -O|--remote-name) [ "$tool" = curl ] && remote_name=1 ;;
    -qO-|-O-) out=- ;;
    -o*) [ "$tool" = curl ] && [ "$a" != "-o" ] && out=${a#-o} ;;
  esac
  prev=$a
done
local_file=""
if [ -n "$url" ] && [ -f "$here/../urls.tsv" ]; then
  while IFS="$(printf '\t')" read -r pattern file; do
    case "$url" in $pattern) local_file=$here/../$file; break ;; esac
  done < "$here/../urls.tsv"
fi
if [ -z "$local_file" ]; then
  exec "$real" "$@"
fi
echo "$(date -u +%FT%TZ) $tool $url -> $local_file" >> /tmp/.tmax-offline.log 2>/dev/null || true
if [ "$tool" = wget ] && [ -z "$out" ]; then out=$(basename "$url"); fi
if [ "$remote_name" = 1 ]; then out=$(basename "$url"); fi
if [ -z "$out" ] || [ "$out" = - ]; then exec cat "$local_file"; fi
cp "$local_file" "$out"
