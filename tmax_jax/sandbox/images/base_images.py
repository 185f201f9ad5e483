"""Base images: what a Dockerfile's FROM maps to, built locally from Debian (no container registry).

Each mapping is a recipe Dockerfile in `sandbox/bases/<name>/Dockerfile` that starts
`FROM debootstrap:<suite>` (a debootstrap --variant=minbase rootfs with what the harness itself
needs: bash, coreutils, procps, tar, python3, tmux, the `agent` user) or FROM another mapped image
(tbench-ubuntu-24-04 is FROM ubuntu:24.04, as the real one is), and installs what the original
image ships; recipes are built by the same layer builder with sandbox/bases as the context (so
they can COPY sandbox/bases/compat), cached by content hash and shared by every task on them.
`tmax-base:bookworm` is the project's own base rootfs (sandbox/packages.txt). The comparison with
the real images is in docs/design/task-images.md "Base images"; sandbox/bases/deviations.toml
lists the known deviations that can fail a build step, and `attribute_failure` names them in a
failed build.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
import tomllib

from tmax_jax.sandbox.api import SandboxError
from tmax_jax.sandbox.images import base_rootfs, dockerfile

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
  (r"(docker\.io/)?(library/)?ubuntu:(22\.04|jammy)(-.*)?", "ubuntu-22-04"),
  (r"(docker\.io/)?(library/)?ubuntu:(24\.04|noble|latest)(-.*)?", "ubuntu-24-04"),
  (r"(docker\.io/)?(library/)?debian:(12|bookworm)(\..*|-.*)?", "debian-bookworm"),
  (r"(docker\.io/)?(library/)?debian:(13|trixie|latest|stable)(\..*|-.*)?", "debian-trixie"),
  (r"tmax-base:bookworm", "tmax-base"),
)
# The nearest base for references the table does not know (checked in order).
_NEAREST = (
  (r"python:3\.(1[2-9])", "python-3-13", "Python 3.13 from Debian trixie"),
  (r"python:3\.([0-9]|10)\b", "python-3-11", "Python 3.11 from Debian bookworm"),
  (r"python", "python-3-11", "Python 3.11 from Debian bookworm"),
  (r"ubuntu:2[4-9]|noble|oracular|plucky", "ubuntu-24-04", "Debian trixie as Ubuntu 24.04"),
  (r"ubuntu", "ubuntu-22-04", "Debian bookworm as Ubuntu 22.04"),
  (r"debian|buildpack", "debian-bookworm", "Debian bookworm"),
)
DEFAULT_NEAREST = ("buildpack", "Debian bookworm with build tools")


def recipes_dir() -> pathlib.Path:
  return base_rootfs.sandbox_dir() / "bases"


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


def _recipe(name: str) -> tuple[pathlib.Path, str, Base]:
  """(recipe file, its text, the base it is FROM)."""
  recipe = recipes_dir() / name / "Dockerfile"
  text = recipe.read_text()
  found = re.search(r"^FROM\s+(\S+)", text, re.M)
  if found is None:
    raise ValueError(f"{recipe}: no FROM line")
  return recipe, text, resolve(found.group(1))


def _load(name: str) -> Base:
  """The recipe's suite, env and workdir, on top of those of the image it is FROM."""
  if name == "tmax-base":
    return Base("tmax-base", workdir="/")
  recipe, text, parent = _recipe(name)
  env = dict(parent.env)
  workdir = parent.workdir
  for i in dockerfile.instructions(text, str(recipe)):
    if i.cmd == "ENV":
      env.update(dockerfile.key_values(i, env, str(recipe)))
    elif i.cmd == "WORKDIR":
      workdir = i.args.strip()
  return Base(name, suite=parent.suite, env=tuple(env.items()), workdir=workdir)


def debian_mirror() -> str:
  return base_rootfs.detect_mirror()


def post_lines(base: Base) -> list[str]:
  """The recipe's RUN lines (for Apptainer %post): the base built the same way on a cluster.
  Its COPY sources are in recipe_files (for %files)."""
  if base.name in ("tmax-base",) or base.name.startswith("debootstrap-"):
    pkgs = (
      base_rootfs.read_packages()
      if base.name == "tmax-base"
      else base_rootfs.read_packages(recipes_dir() / "minimal.txt")
    )
    return [
      f"apt-get update -q && apt-get install -y -q --no-install-recommends {' '.join(pkgs)}",
      "useradd -m -u 1000 -s /bin/bash agent || true",
    ]
  _, text, parent = _recipe(base.name)
  return [*post_lines(parent), *(i.args for i in dockerfile.instructions(text) if i.cmd == "RUN")]


def recipe_files(base: Base) -> list[tuple[pathlib.Path, str]]:
  """(host path, image path) of every COPY of the recipe and the recipes it is FROM."""
  if base.name == "tmax-base" or base.name.startswith("debootstrap-"):
    return []
  recipe, text, parent = _recipe(base.name)
  out = recipe_files(parent)
  for i in dockerfile.instructions(text, str(recipe)):
    if i.cmd != "COPY":
      continue
    srcs, dest = dockerfile.copy_args(i, {}, str(recipe))
    for src in map(recipes_dir().joinpath, srcs):
      if src.is_dir():  # Docker copies a directory's contents; %files would nest the directory
        out += [
          (f, f"{dest.rstrip('/')}/{f.relative_to(src)}")
          for f in sorted(src.rglob("*"))
          if f.is_file()
        ]
      else:
        out.append((src, dest))
  return out


# ----------------------------------------------------------------------------------------------
# known deviations (sandbox/bases/deviations.toml)

DEVIATION_TAG = "stand-in deviation"


@dataclasses.dataclass(frozen=True)
class Deviation:
  """A known difference of stand-in `bases` from their real images that fails build steps whose
  output matches one of `match`."""

  id: str
  bases: tuple[str, ...]
  what: str
  failure: str
  match: tuple[str, ...]


BASE_BUILD = Deviation(
  "base-build",
  (),
  "the stand-in base is built here from Debian's archive and PyPI",
  "its recipe did not build (a registry unreachable, a package gone from the archive)",
  (),
)


def deviations() -> tuple[Deviation, ...]:
  """sandbox/bases/deviations.toml (of the current TMAX_SANDBOX_DIR)."""
  return _read_deviations(recipes_dir() / "deviations.toml")


@functools.cache
def _read_deviations(path: pathlib.Path) -> tuple[Deviation, ...]:
  out = []
  for key, row in tomllib.loads(path.read_text()).items():
    missing = {"bases", "what", "failure", "match"} - set(row)
    if missing:
      raise ValueError(f"{path}: [{key}] lacks {sorted(missing)}")
    for pattern in row["match"]:
      try:
        re.compile(pattern)
      except re.error as err:
        raise ValueError(f"{path}: [{key}] match {pattern!r} is not a regex: {err}") from None
    out.append(
      Deviation(key, tuple(row["bases"]), row["what"], row["failure"], tuple(row["match"]))
    )
  return tuple(out)


def known_deviations(base_name: str, output: str) -> list[Deviation]:
  """The deviations of base `base_name` whose failure signature is in a failed step's `output`."""
  return [
    d for d in deviations() if base_name in d.bases and any(re.search(p, output) for p in d.match)
  ]


class StandInBuildError(SandboxError):
  """A build step failed on a stand-in base in a way one of its known deviations explains:
  `base` the stand-in, `deviations` their ids; the message names them first."""

  def __init__(self, base: str, found: list[Deviation], err: Exception):
    lines = "; ".join(f"{d.id}: {d.what} -> {d.failure}" for d in found)
    super().__init__(
      f"[{DEVIATION_TAG}: {', '.join(d.id for d in found)}] the step failed on the stand-in base "
      f"{base}, and a known deviation from the real image can cause this ({lines})\n{err}"
    )
    self.base, self.deviations = base, tuple(d.id for d in found)


def attribute_failure(err: SandboxError, base_name: str) -> SandboxError:
  """`err` (a failed build step on `base_name`) as a StandInBuildError when a known deviation of
  that base matches its output, else `err` itself."""
  found = known_deviations(base_name, str(err))
  return StandInBuildError(base_name, found, err) if found else err


def deviation_ids(reason: str) -> tuple[str, ...]:
  """The deviation ids a build_failed reason (from a StandInBuildError) names, else ()."""
  m = re.search(rf"\[{DEVIATION_TAG}: ([^\]]+)\]", reason)
  return tuple(s.strip() for s in m.group(1).split(",")) if m else ()
