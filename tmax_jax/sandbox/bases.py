"""Base images: what a Dockerfile's FROM maps to, built locally from Debian (no container registry).

Each mapping is a recipe Dockerfile in `sandbox/bases/<name>/Dockerfile` that starts
`FROM debootstrap:<suite>` (a debootstrap --variant=minbase rootfs with what the harness itself
needs: bash, coreutils, procps, tar, python3, tmux, the `agent` user) and installs what the
original image ships; recipes are built by the same layer builder, so they are cached by content
hash and shared by every task on them. `tmax-base:bookworm` is the project's own base rootfs
(sandbox/packages.txt). The table and each mapping's deviations are in BUILD_NOTES "Task images".
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from tmax_jax.sandbox import images

NEAREST_WARNING = "FROM {ref} has no local equivalent; built on {name} ({why})"


@dataclasses.dataclass(frozen=True)
class Base:
  """name: recipe dir under sandbox/bases (or "tmax-base" / "debootstrap-<suite>")."""

  name: str
  suite: str = "bookworm"
  env: tuple[tuple[str, str], ...] = ()
  workdir: str = "/"
  warning: str = ""


# (pattern on the image reference without registry tag noise, base name). First match wins.
_TABLE = (
  (r"ghcr\.io/laude-institute/t-bench/python-3-13(:.*)?", "tbench-python-3-13"),
  (r"ghcr\.io/laude-institute/t-bench/ubuntu-24-04(:.*)?", "tbench-ubuntu-24-04"),
  (r"ghcr\.io/laude-institute/t-bench/deveval(:.*)?", "tbench-deveval"),
  (r"(docker\.io/)?(library/)?buildpack-deps:(jammy|22\.04|bookworm|12)(-.*)?", "buildpack"),
  (r"(docker\.io/)?(library/)?python:3\.13(\..*)?(-.*)?", "python-3-13"),
  (r"(docker\.io/)?(library/)?python:3\.11(\..*)?(-.*)?", "python-3-11"),
  (r"(docker\.io/)?(library/)?ubuntu:(22\.04|jammy)(-.*)?", "debian-bookworm"),
  (r"(docker\.io/)?(library/)?ubuntu:(24\.04|noble|latest)(-.*)?", "debian-trixie"),
  (r"(docker\.io/)?(library/)?debian:(12|bookworm)(\..*|-.*)?", "debian-bookworm"),
  (r"(docker\.io/)?(library/)?debian:(13|trixie|latest|stable)(\..*|-.*)?", "debian-trixie"),
  (r"tmax-base:bookworm", "tmax-base"),
)
# The nearest base for references the table does not know (checked in order).
_NEAREST = (
  (r"python:3\.(1[2-9])", "python-3-13", "Python 3.13 from Debian trixie"),
  (r"python:3\.([0-9]|10)\b", "python-3-11", "Python 3.11 from Debian bookworm"),
  (r"python", "python-3-11", "Python 3.11 from Debian bookworm"),
  (r"ubuntu:2[4-9]|noble|oracular|plucky", "debian-trixie", "Debian trixie"),
  (r"ubuntu|debian|buildpack", "debian-bookworm", "Debian bookworm"),
)
DEFAULT_NEAREST = ("buildpack", "Debian bookworm with build tools")


def recipes_dir() -> pathlib.Path:
  return images.sandbox_dir() / "bases"


def resolve(ref: str) -> Base:
  """The base for an image reference; an unknown one maps to the nearest with a warning."""
  plain = ref.split("@", 1)[0]
  if plain.startswith("debootstrap:"):
    return Base(f"debootstrap-{plain.split(':', 1)[1]}", suite=plain.split(":", 1)[1])
  for pattern, name in _TABLE:
    if re.fullmatch(pattern, plain):
      return _load(name)
  for pattern, name, why in _NEAREST:
    if re.search(pattern, plain):
      return dataclasses.replace(
        _load(name), warning=NEAREST_WARNING.format(ref=ref, name=name, why=why)
      )
  name, why = DEFAULT_NEAREST
  return dataclasses.replace(
    _load(name), warning=NEAREST_WARNING.format(ref=ref, name=name, why=why)
  )


def _load(name: str) -> Base:
  if name == "tmax-base":
    return Base("tmax-base", workdir="/")
  from tmax_jax.sandbox import dockerfile  # pylint: disable=import-outside-toplevel

  recipe = recipes_dir() / name / "Dockerfile"
  text = recipe.read_text()
  suite = re.search(r"^FROM\s+debootstrap:(\S+)", text, re.M).group(1)
  env: dict = {}
  workdir = "/"
  for i in dockerfile.instructions(text, str(recipe)):
    if i.cmd == "ENV":
      env.update(dockerfile.key_values(i, env, str(recipe)))
    elif i.cmd == "WORKDIR":
      workdir = i.args.strip()
  return Base(name, suite=suite, env=tuple(env.items()), workdir=workdir)


def ensure_base(base: Base, *, quiet: bool = True) -> tuple[pathlib.Path, tuple[str, ...], str]:
  """-> (rootfs dir, layer ids on top of it, an id naming both). Builds what is missing."""
  if base.name == "tmax-base":
    root = images.ensure_base_rootfs(quiet=quiet)
    return root, (), f"tmax-base:{root.name}"
  if base.name.startswith("debootstrap-"):
    root = images.ensure_debootstrap(base.suite, quiet=quiet)
    return root, (), f"{base.name}:{root.name}"
  from tmax_jax.sandbox import build  # pylint: disable=import-outside-toplevel

  image = build.build_image(recipes_dir() / base.name, quiet=quiet, finalize=False)
  return pathlib.Path(image.base), image.layers, f"{base.name}:{image.id}"


def debian_mirror() -> str:
  return images.detect_mirror()


def post_lines(base: Base) -> list[str]:
  """The recipe's RUN lines (for Apptainer %post): the base built the same way on a cluster."""
  if base.name in ("tmax-base",) or base.name.startswith("debootstrap-"):
    pkgs = (
      images.read_packages()
      if base.name == "tmax-base"
      else images.read_packages(recipes_dir() / "minimal.txt")
    )
    return [
      f"apt-get update -q && apt-get install -y -q --no-install-recommends {' '.join(pkgs)}",
      "useradd -m -u 1000 -s /bin/bash agent || true",
    ]
  from tmax_jax.sandbox import dockerfile  # pylint: disable=import-outside-toplevel

  text = (recipes_dir() / base.name / "Dockerfile").read_text()
  parent = resolve(re.search(r"^FROM\s+(\S+)", text, re.M).group(1))
  return [*post_lines(parent), *(i.args for i in dockerfile.instructions(text) if i.cmd == "RUN")]
