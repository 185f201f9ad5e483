#!/bin/sh
# Local stand-in for the NodeSource setup script (deb.nodesource.com/setup_N.x): that repository
# is not reachable, so Debian's own nodejs and npm are installed instead (bookworm: Node 18);
# the `apt-get install -y nodejs` that usually follows is then a no-op.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends nodejs npm
echo "node $(node --version) from Debian (NodeSource repository not reachable offline)"
