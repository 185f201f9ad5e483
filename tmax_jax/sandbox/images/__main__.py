"""The image-building CLI: the base rootfs every sandbox starts from, and task images.

  python3 -m tmax_jax.sandbox.images base [--force] [--mirror URL] [--podman] [--prune] [--harness]
  python3 -m tmax_jax.sandbox.images build [DIR] [--apptainer] [--prune_days N]

`base` builds (once) the debootstrap rootfs and prints its path; with --podman also its podman
image, with --harness the harness layer's files (uv, pytest wheels) every task image gets. It is
what .ci/install runs (as `python3 -m tmax_jax.sandbox ...`, the same command). `build` builds a
task image from DIR/Dockerfile (cached layers) and prints its record's path; --apptainer prints
the equivalent Apptainer definition instead, --prune_days N cleans the layer cache.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import urllib.parse

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.sandbox.api import SandboxError
from tmax_jax.sandbox.images import apptainer, base_rootfs, builder, mirror, podman_store

BASE_HELP = "build (once) and print the base task rootfs path"
BUILD_HELP = "build a task image from a Dockerfile context and print its record's path"


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(description="Build the base rootfs (base) or a task image (build).")
  commands = parser.add_subparsers(dest="command", required=True, metavar="{base,build}")
  add_base_flags(
    commands.add_parser("base", help=BASE_HELP, description=BASE_HELP.capitalize() + ".")
  )
  build = commands.add_parser("build", help=BUILD_HELP, description=BUILD_HELP.capitalize() + ".")
  _build_flags(build)
  args = parser.parse_args(argv)
  if args.command == "base":
    return base(args)
  return _build(args, build)


def add_base_flags(parser: argparse.ArgumentParser) -> None:
  """The base command's flags (also `python3 -m tmax_jax.sandbox`'s, sandbox/__main__.py)."""
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


def _build_flags(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("context", nargs="?", help="directory holding the Dockerfile")
  parser.add_argument("--apptainer", action="store_true", help="print the Apptainer definition")
  parser.add_argument(
    "--prune_days",
    type=float,
    default=None,
    help="delete images unused for this many days and unreferenced layers",
  )


def base(args: argparse.Namespace) -> int:
  """Builds (once) the base rootfs and prints its path (and what --podman / --harness add)."""
  path = base_rootfs.ensure_base_rootfs(force=args.force, mirror=args.mirror)
  print(path)
  if args.prune:
    for old in base_rootfs.prune_rootfs(keep=path):
      print(f"removed {old}", file=sys.stderr)
  if args.podman:
    print(podman_store.ensure_podman_image(path))
  if args.harness:
    print(mirror.harness_dir())
  return 0


def _build(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
  if args.context is None and args.prune_days is None:
    parser.print_usage(sys.stderr)
    parser.error("nothing to do: give a CONTEXT directory (with a Dockerfile) or --prune_days N")
  if args.prune_days is not None:
    print(f"removed {len(builder.prune(args.prune_days))} images/layers")
  if args.context is None:
    return 0
  context = pathlib.Path(args.context)
  if not (context / "Dockerfile").is_file():
    what = "no such directory" if not context.is_dir() else "no Dockerfile in it"
    raise UserError(f"{context}: {what} (expected a task's environment/ directory)")
  if args.apptainer:
    print(apptainer.apptainer_def(context))
    return 0
  try:
    print(builder.build_image(context, quiet=False).path)
  except SandboxError as e:  # a step of the user's Dockerfile failed (its output streamed above)
    raise UserError(builder.failed_step_message(e)) from e
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
