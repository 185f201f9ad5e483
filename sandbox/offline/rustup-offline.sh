#!/bin/sh
# Local stand-in for the rustup installer (https://sh.rustup.rs): installs Debian's Rust toolchain
# (rustc-web/cargo-web where present, else rustc/cargo) and the crates test scripts add most
# (anyhow, regex, thiserror) as Debian-vendored sources, links the tools into $CARGO_HOME/bin as
# rustup would, and points cargo at the vendored crates (offline: no crates.io here).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
if apt-cache show rustc-web >/dev/null 2>&1; then tools="rustc-web cargo-web"; else tools="rustc cargo"; fi
# +default: Debian splits crate features into packages; regex's default features need aho-corasick
regex=librust-regex-dev
apt-cache show librust-regex+default-dev >/dev/null 2>&1 && regex=librust-regex+default-dev
apt-get install -y -q --no-install-recommends $tools librust-anyhow-dev "$regex" \
  librust-thiserror-dev gcc libc6-dev
bin=${CARGO_HOME:-$HOME/.cargo}/bin
mkdir -p "$bin"
for t in rustc cargo rustdoc; do
  p=$(command -v "$t" || ls /usr/lib/rust-web/bin/$t /usr/lib/rust-*/bin/$t 2>/dev/null | head -1 || true)
  [ -n "$p" ] && ln -sf "$p" "$bin/$t"
done
printf '#!/bin/sh\ncase ":${PATH}:" in *:"%s":*) ;; *) export PATH="%s:$PATH" ;; esac\n' "$bin" "$bin" \
  > "${CARGO_HOME:-$HOME/.cargo}/env"
mkdir -p /.cargo
cat > /.cargo/config.toml <<CFG
# tmax_jax: crates come from Debian's vendored sources (no crates.io offline)
[source.crates-io]
replace-with = "debian-vendor"
[source.debian-vendor]
directory = "/usr/share/cargo/registry"
[net]
offline = true
CFG
echo "rust installed offline: $("$bin/rustc" --version)"
