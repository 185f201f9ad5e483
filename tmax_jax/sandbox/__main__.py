"""`python3 -m tmax_jax.sandbox [--force] [--mirror URL] [--podman] [--prune] [--harness]`: the
base rootfs every sandbox starts from, built once (what .ci/install runs). The same command as
`python3 -m tmax_jax.sandbox.images base ...` (sandbox/images/__main__.py), kept at the package's
name because CI and the guides run it there."""

from __future__ import annotations

from tmax_jax import cli
from tmax_jax.sandbox.images import __main__ as images_cli


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(description=images_cli.BASE_HELP.capitalize() + ".")
  images_cli.add_base_flags(parser)
  return images_cli.base(parser.parse_args(argv))


if __name__ == "__main__":
  cli.run(main)
