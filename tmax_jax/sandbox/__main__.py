"""Build (once) the base task rootfs and print its path; with --podman also its podman image,
with --harness the harness layer's files (uv, pytest wheels) that every task image gets.

python3 -m tmax_jax.sandbox [--force] [--mirror URL] [--podman] [--prune] [--harness]
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse

from tmax_jax import cli
from tmax_jax.sandbox import images, mirror, podman


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(description="Build (once) and print the base task rootfs path.")
  parser.add_argument("--force", action="store_true", help="rebuild even when the cache has it")
  parser.add_argument(
    "--mirror",
    type=_mirror_url,
    default=None,
    help="Debian mirror, an http(s):// or file:// URL (default: the one apt uses here)",
  )
  parser.add_argument(
    "--podman", action="store_true", help="also import the rootfs as a podman image"
  )
  parser.add_argument(
    "--prune", action="store_true", help="delete rootfs builds of older definitions"
  )
  parser.add_argument(
    "--harness",
    action="store_true",
    help="also fetch the harness layer's files (uv, pytest wheels) for task images",
  )
  args = parser.parse_args(argv)
  path = images.ensure_base_rootfs(force=args.force, mirror=args.mirror)
  print(path)
  if args.prune:
    for old in images.prune_rootfs(keep=path):
      print(f"removed {old}", file=sys.stderr)
  if args.podman:
    print(podman.ensure_podman_image(path))
  if args.harness:
    print(mirror.harness_dir())
  return 0


def _mirror_url(value: str) -> str:
  """A mirror debootstrap can use (argparse reports the ValueError as `argument --mirror: ...`)."""
  scheme = urllib.parse.urlsplit(value).scheme
  if scheme not in ("http", "https", "file"):
    raise argparse.ArgumentTypeError(
      f"{value!r} is not a mirror URL (expected http://HOST/debian, https://... or file:///DIR)"
    )
  return value


if __name__ == "__main__":
  cli.run(main)
