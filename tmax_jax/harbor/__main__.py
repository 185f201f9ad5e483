"""`python3 -m tmax_jax.harbor <harbor args>`: Harbor's CLI from its venv, with the environment
the project's podman storage and this checkout need (venv.environ)."""

import os
import sys

from tmax_jax.harbor import venv


def main() -> None:
  reason = venv.unavailable()
  if reason:
    sys.exit(f"Harbor is not installed: {reason}")
  harbor = str(venv.bin_path("harbor"))
  os.execve(harbor, [harbor, *sys.argv[1:]], venv.environ())


if __name__ == "__main__":
  main()
