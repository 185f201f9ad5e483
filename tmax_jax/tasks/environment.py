"""Turns a task's environment/ directory into a sandbox EnvironmentSpec.

Default (`built_spec`): the Dockerfile is built into a real image (tmax_jax.sandbox.images.builder:
RUN as root with the network on during the build, layers cached by content hash); the spec starts
from that image with its ENV and WORKDIR, the offline stand-ins first in PATH, and the task's
[environment] env on top. environment/seeds/ is copied into the workdir (the TMAX-15K layout)
unless the Dockerfile COPYs it itself.
With a fixed image (`environment_spec(task, image)`, RunnerConfig.image set) the Dockerfile is
*translated* instead: FROM -> that image, WORKDIR/ENV/COPY/ADD(local)/RUN -> workdir/env/files/
setup_commands run at sandbox start as the sandbox user; runtime-only instructions are ignored.
"""

from __future__ import annotations

import dataclasses
import pathlib
import posixpath
import re
import shlex

from tmax_jax.sandbox import EnvironmentSpec, Limits
from tmax_jax.sandbox.images import base_rootfs, builder
from tmax_jax.sandbox.images import dockerfile as dockerfile_lib
from tmax_jax.sandbox.images.image import Image
from tmax_jax.tasks.format import Task, TaskFormatError

DEFAULT_WORKDIR = "/workspace"
_IGNORED = {
  "CMD",
  "ENTRYPOINT",
  "EXPOSE",
  "LABEL",
  "ARG",
  "USER",
  "VOLUME",
  "HEALTHCHECK",
  "SHELL",
  "STOPSIGNAL",
  "MAINTAINER",
  "ONBUILD",
}


def dockerfile_instructions(
  text: str, file: str = "environment/Dockerfile"
) -> list[tuple[int, str, str]]:
  """[(line, INSTRUCTION, arguments)]: sandbox.dockerfile.instructions, errors as TaskFormatError"""
  try:
    return [
      (i.line, i.cmd, " ".join([*(f"--{k}={v}" for k, v in i.flags), i.args]).strip())
      for i in dockerfile_lib.instructions(text, file)
    ]
  except dockerfile_lib.DockerfileError as err:
    raise TaskFormatError(file, f"line {err.line}", err.problem) from None


def _copy_entries(env_dir: pathlib.Path, args: str, workdir: str, file: str, field: str):
  parts = dockerfile_lib.exec_form(args) or shlex.split(args)
  parts = [p for p in parts if not p.startswith("--")]
  if len(parts) < 2:
    raise TaskFormatError(file, field, f"COPY needs a source and a destination, got {args!r}")
  *srcs, raw = parts
  dst_is_dir = raw.endswith("/") or raw in (".", "..") or raw.endswith("/.") or len(srcs) > 1
  dst = posixpath.normpath(raw if raw.startswith("/") else posixpath.join(workdir, raw))
  entries = []
  for src in srcs:
    if "://" in src:
      raise TaskFormatError(file, field, f"remote source {src!r} cannot be fetched offline")
    host = (env_dir / src).resolve()
    if not host.is_relative_to(env_dir.resolve()) or not host.exists():
      raise TaskFormatError(file, field, f"source {src!r} does not exist under environment/")
    if host.is_dir():
      for p in sorted(host.rglob("*")):
        if p.is_file():
          entries.append((str(p), posixpath.join(dst, p.relative_to(host).as_posix())))
    else:
      target = posixpath.join(dst, host.name) if dst_is_dir else dst
      entries.append((str(host), target))
  return entries


def environment_spec(
  task: Task,
  image: str,
  *,
  memory_mb: int | None = None,
  allow_network: bool = False,
  enforce_limits: bool = True,
) -> EnvironmentSpec:
  """The sandbox spec for `task` (which must have been loaded from or written to disk)."""
  if task.path is None:
    raise ValueError("environment_spec needs a task on disk (load_task or write_task first)")
  env_dir = task.path / "environment"
  cfg = task.config.environment
  workdir, env, files, setup = DEFAULT_WORKDIR, dict(cfg.env), [], []
  dockerfile = env_dir / "Dockerfile"
  if dockerfile.is_file():
    file = str(dockerfile)
    for no, ins, args in dockerfile_instructions(dockerfile.read_text(encoding="utf-8"), file):
      field = f"line {no} ({ins})"
      if ins == "FROM" or ins in _IGNORED:
        continue
      if ins == "WORKDIR":
        workdir = args if args.startswith("/") else posixpath.join(workdir, args)
        setup.append(f"mkdir -p {shlex.quote(workdir)}")
      elif ins == "ENV":
        if "=" in args.split(" ", 1)[0]:
          for kv in shlex.split(args):
            k, _, v = kv.partition("=")
            env[k] = v
        else:
          k, _, v = args.partition(" ")
          env[k] = v.strip()
      elif ins in ("COPY", "ADD"):
        files += _copy_entries(env_dir, args, workdir, file, field)
      elif ins == "RUN":
        argv = dockerfile_lib.exec_form(args)
        cmd = shlex.join(argv) if argv else args
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
        setup.append(f"cd {shlex.quote(workdir)} && {exports}{cmd}")
      else:
        raise TaskFormatError(file, field, f"unsupported instruction {ins}")
  if cfg.workdir:
    workdir = cfg.workdir
  seeds = env_dir / "seeds"
  if seeds.is_dir() and not any(h.startswith(str(seeds.resolve())) for h, _ in files):
    files = _copy_entries(env_dir, f"seeds/ {workdir}/", workdir, str(env_dir), "seeds") + files
  # The runner's memory (the recipe's 4 GB) overrides the task's own request when given.
  limits = Limits(
    memory_mb=memory_mb or cfg.memory_mb, disk_mb=cfg.storage_mb, enforce_limits=enforce_limits
  )
  return EnvironmentSpec(
    image=image,
    workdir=workdir,
    files=tuple(files),
    setup_commands=tuple(setup),
    env=tuple(sorted(env.items())),
    limits=limits,
    allow_network=allow_network and cfg.allow_internet,
  )


OFFLINE_BIN = "/opt/tmax/offline/bin"  # curl/wget/apt-get stand-ins (sandbox/offline/)
OFFLINE_ENV = {  # package managers fail fast and use their caches instead of waiting on DNS
  "UV_FIND_LINKS": "/opt/tmax/wheels",
  "UV_OFFLINE": "1",
  "PIP_FIND_LINKS": "/opt/tmax/wheels",
  "npm_config_offline": "true",
  "GOPROXY": "off",
  "GOFLAGS": "-mod=mod",
  "GOTOOLCHAIN": "local",
  "CARGO_NET_OFFLINE": "true",
}


_PIP = re.compile(r"(?:^|[;&|(]\s*|\s)(?:pip3?|python3? -m pip) install\s+([^;&|#\n]*)")
_NPM = re.compile(r"(?:^|[;&|(]\s*|\s)npm (?:install|ci|i)\b")
_PIP_SKIP = {"pip", "setuptools", "wheel"}


def _pip_install(before: str) -> str:
  """The command a prefetch step installs one requirement with: the image's pip, or, with a
  cutoff, the harness layer's uv resolving against uploads before it (`--exclude-newer`: pip
  reads PIP_UPLOADED_PRIOR_TO only from 26.0 on, and the images' pips are older)."""
  if not before:
    return "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q"
  return (
    "uv pip install -q --system --break-system-packages --python python3 "
    f"--exclude-newer {shlex.quote(before)}"
  )


def prefetch_steps(task: Task, packages_before: str = "") -> tuple[str, ...]:
  """Build steps that install what the task's test scripts install at grading time (they were
  written for containers with network; the sandboxes are offline): `pip install -r FILE` / `pip
  install PKG` lines -> the same installs at build time (each requirement on its own, failures
  only logged: scripts filter their requirement files before installing), `npm install` -> run
  once in the workdir at build time. The runner records each step as a rewrite.
  packages_before: an RFC 3339 cutoff (runner.task_cutoff) the installs resolve against, so a
  benchmark's test-time installs get the versions of its day, not today's ("" = the newest)."""
  install = _pip_install(packages_before)
  tests = task.path / "tests" if task.path else None
  texts = (
    [p.read_text(errors="replace") for p in sorted(tests.rglob("*.sh"))]
    if (tests and tests.is_dir())
    else []
  )
  steps: list[str] = []
  for text in texts:
    for m in _PIP.finditer(text):
      words = shlex.split(m.group(1), comments=True) if m.group(1).strip() else []
      for i, word in enumerate(words):
        if words[i - 1] in ("-r", "--requirement") and i > 0:
          q = shlex.quote(word)
          steps.append(
            f"[ -f {q} ] && grep -v '^[[:space:]]*#' {q} "
            f'| while read -r req; do [ -z "$req" ] || {install} "$req" '
            '|| echo "prefetch: $req not installed"; done; true'
          )
        elif (
          not word.startswith("-")
          and words[i - 1] not in ("-r", "--requirement")
          and (re.split(r"[<>=!~\[ ]", word)[0].lower() not in _PIP_SKIP)
          and not re.search(r"[$/]|^\d*[<>]", word)
        ):
          steps.append(f"{install} {shlex.quote(word)} || echo 'prefetch: {word} not installed'")
    if _NPM.search(text):
      steps.append("[ ! -f package.json ] || npm install --no-audit --no-fund")
  return tuple(dict.fromkeys(steps))


@dataclasses.dataclass(frozen=True)
class BuiltEnvironment:
  """A task's sandbox spec and the image it starts from (warnings/rewrites go into the trial)."""

  spec: EnvironmentSpec
  image: Image | None  # None: no Dockerfile, the project's base rootfs

  def notes(self) -> str:
    """What the trial records about the environment (one line per deviation)."""
    if self.image is None:
      return "no environment/Dockerfile: the project's base rootfs\n"
    lines = [
      f"image {self.image.id} FROM {self.image.from_ref} "
      f"(built in {self.image.build_seconds:.1f} s, "
      f"{sum(1 for st in self.image.steps if not st['cached'])} new layers)"
    ]
    lines += [f"warning: {w}" for w in self.image.warnings]
    lines += [f"rewrite: {r}" for r in self.image.rewrites]
    lines.append(f"rewrite: PATH starts with {OFFLINE_BIN} (offline curl/wget/apt-get stand-ins)")
    return "\n".join(lines) + "\n"


def built_spec(
  task: Task,
  *,
  memory_mb: int | None = None,
  allow_network: bool = False,
  enforce_limits: bool = True,
  quiet: bool = True,
  context: pathlib.Path | None = None,
  dockerfile: str = "Dockerfile",
  packages_before: str = "",
) -> BuiltEnvironment:
  """Builds (or finds cached) the task's image and returns the spec that starts from it.
  context/dockerfile: another build context than environment/ (a compose main service's).
  packages_before: the cutoff the test-time installs prefetched at build time resolve against
  (prefetch_steps; a different cutoff is a different image).
  Raises DockerfileError / SandboxError when the build fails."""
  if task.path is None:
    raise ValueError("built_spec needs a task on disk (load_task or write_task first)")
  env_dir = task.path / "environment"
  cfg = task.config.environment
  if context is None and not (env_dir / "Dockerfile").is_file():  # the base rootfs + seeds
    spec = environment_spec(
      task,
      str(base_rootfs.ensure_base_rootfs(quiet=True)),
      memory_mb=memory_mb,
      allow_network=allow_network,
      enforce_limits=enforce_limits,
    )
    return BuiltEnvironment(spec, None)
  image = builder.build_image(
    context or env_dir,
    dockerfile_name=dockerfile,
    seeds_into_workdir=True,
    seeds_default_dir=cfg.workdir or DEFAULT_WORKDIR,
    timeout_s=max(cfg.build_timeout_sec, 600.0),
    quiet=quiet,
    extra_steps=prefetch_steps(task, packages_before),
  )
  env = dict(image.env)
  env.update(OFFLINE_ENV)
  env["PATH"] = f"{OFFLINE_BIN}:{env.get('PATH', builder.DEFAULT_PATH)}"
  env.update(cfg.env)
  workdir = cfg.workdir or (image.workdir if image.workdir != "/" else DEFAULT_WORKDIR)
  limits = Limits(
    memory_mb=memory_mb or cfg.memory_mb, disk_mb=cfg.storage_mb, enforce_limits=enforce_limits
  )
  spec = EnvironmentSpec(
    image=str(image.path),
    workdir=workdir,
    env=tuple(sorted(env.items())),
    limits=limits,
    allow_network=allow_network and cfg.allow_internet,
  )
  return BuiltEnvironment(spec, image)
