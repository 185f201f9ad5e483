#!/bin/sh
# Local stand-in for the uv installer script (tmax_jax task images): installs the uv that the
# image ships (/usr/local/bin/uv, from PyPI) where the real installer would, and writes the same
# env file, so `curl -LsSf .../uv/<version>/install.sh | sh; source $HOME/.local/bin/env` works
# offline. The version is the image's, not the one in the URL.
set -eu
dest=${UV_INSTALL_DIR:-${XDG_BIN_HOME:-$HOME/.local/bin}}
mkdir -p "$dest"
src=/usr/local/bin
[ -x "$src/uv" ] || src=/.tmax-build/files  # during an image build, before the harness layer
cp "$src/uv" "$src/uvx" "$dest"/
cat > "$dest/env" <<ENVEOF
#!/bin/sh
case ":\${PATH}:" in
  *:"$dest":*) ;;
  *) export PATH="$dest:\$PATH" ;;
esac
ENVEOF
echo "everything's installed! (uv $("$dest/uv" --version | cut -d' ' -f2), offline copy)"
