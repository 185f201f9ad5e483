#!/bin/sh
# Builds the base task rootfs (the bubblewrap/podman equivalent of base.def) into OUT_DIR:
#   build_rootfs.sh OUT_DIR PACKAGES_FILE [MIRROR]
# debootstrap --variant=minbase bookworm, then apt-get install of PACKAGES_FILE inside a chroot.
# /proc and /dev are mounted in a private mount namespace (unshare -m), so nothing leaks onto the
# host when the build fails. Needs root. The caller renames OUT_DIR into the cache (atomic).
set -eu
OUT="$1"
PKGS_FILE="$2"
MIRROR="${3:-http://deb.debian.org/debian}"
SUITE="${SUITE:-bookworm}"
PKGS=$(grep -v '^[[:space:]]*#' "$PKGS_FILE" | tr -s '[:space:]' ' ')

echo "[build_rootfs] debootstrap $SUITE from $MIRROR into $OUT"
debootstrap --variant=minbase "$SUITE" "$OUT" "$MIRROR"

cp /etc/resolv.conf "$OUT/etc/resolv.conf"
# No service may start inside the chroot during package installation.
printf '#!/bin/sh\nexit 101\n' > "$OUT/usr/sbin/policy-rc.d"
chmod 755 "$OUT/usr/sbin/policy-rc.d"
echo "deb $MIRROR $SUITE main" > "$OUT/etc/apt/sources.list"

echo "[build_rootfs] apt-get install: $PKGS"
unshare -m sh -eu -c "
  mount -t proc proc '$OUT/proc'
  mount --rbind /dev '$OUT/dev'
  chroot '$OUT' /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -eu -c 'apt-get update -q && apt-get install -y -q --no-install-recommends $PKGS \
      && useradd -m -u 1000 -s /bin/bash agent \
      && apt-get clean && rm -rf /var/lib/apt/lists/*'
"
rm -f "$OUT/usr/sbin/policy-rc.d"
: > "$OUT/etc/resolv.conf"
# Mount points the sandboxes bind over (the rootfs itself is mounted read-only).
mkdir -p "$OUT/workspace" "$OUT/logs/agent" "$OUT/logs/verifier" "$OUT/logs/artifacts" \
  "$OUT/tests" "$OUT/solution"
chmod 1777 "$OUT/tmp"
echo "[build_rootfs] done: $(du -sh "$OUT" | cut -f1)"
