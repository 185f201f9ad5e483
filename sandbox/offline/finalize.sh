#!/bin/sh
# The harness layer of every task image, right on its base (run as root at build time, network on,
# with this directory at /.tmax-build): uv and pytest (offline test-time dependencies), the offline
# curl/wget/apt-get stand-ins, the sandbox user and the mount points the sandboxes bind over.
set -eu
H=/.tmax-build
[ -x /usr/local/bin/uv ] || { install -m 0755 "$H/uv" "$H/uvx" /usr/local/bin/; }
mkdir -p /opt/tmax/wheels /opt/tmax/offline/bin
cp "$H"/wheels/*.whl /opt/tmax/wheels/
install -m 0755 "$H/shim.sh" /opt/tmax/offline/bin/curl
install -m 0755 "$H/shim.sh" /opt/tmax/offline/bin/wget
install -m 0755 "$H/apt-get" /opt/tmax/offline/bin/apt-get
install -m 0755 "$H/uv-install.sh" /opt/tmax/offline/uv-install.sh
cp "$H/urls.tsv" /opt/tmax/offline/urls.tsv
if command -v python3 >/dev/null && ! python3 -c "import pytest" 2>/dev/null; then
  /usr/local/bin/uv pip install -q --system --break-system-packages --no-index \
    --find-links /opt/tmax/wheels pytest || echo "finalize: pytest not installed (no usable python3)"
fi
getent passwd 1000 >/dev/null || {
  if command -v useradd >/dev/null; then useradd -m -u 1000 -s /bin/bash agent
  else echo "agent:x:1000:1000::/home/agent:/bin/bash" >> /etc/passwd
       echo "agent:x:1000:" >> /etc/group; fi; }
mkdir -p /workspace /logs/agent /logs/verifier /logs/artifacts /tests /solution /home/agent
chmod 1777 /tmp
chmod 755 /root  # ENV PATH entries under /root (rustup, cargo) reach the unprivileged user
