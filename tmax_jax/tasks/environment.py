"""Turns a task's environment/ directory into a sandbox EnvironmentSpec.

There is no registry and no Docker daemon here, so a Dockerfile is not built: its FROM line is
replaced by the sandbox base image and the rest is translated instruction by instruction:
WORKDIR -> workdir, ENV -> env, COPY/ADD of local paths -> files, RUN -> setup_commands (run once at
sandbox start; a failing RUN is a failed build). Instructions that only matter to a container
runtime (CMD, ENTRYPOINT, EXPOSE, LABEL, ARG, USER, VOLUME, HEALTHCHECK, SHELL, STOPSIGNAL) are
ignored. environment/seeds/ is copied into the workdir (the TMAX-15K layout) unless the Dockerfile
COPYs it itself.
"""

from __future__ import annotations

import json
import pathlib
import posixpath
import shlex

from tmax_jax.sandbox.api import EnvironmentSpec, Limits
from tmax_jax.tasks.format import Task, TaskFormatError

DEFAULT_WORKDIR = "/workspace"
_IGNORED = {"CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "ARG", "USER", "VOLUME", "HEALTHCHECK", "SHELL",
            "STOPSIGNAL", "MAINTAINER", "ONBUILD"}


def dockerfile_instructions(text: str, file: str = "environment/Dockerfile") -> list[tuple[int, str, str]]:
  """Joins continuation lines and drops comments -> [(line number, INSTRUCTION, arguments)]."""
  out, buf, start = [], "", 0
  for no, raw in enumerate(text.splitlines(), 1):
    line = raw.rstrip()
    if not buf and (not line.strip() or line.lstrip().startswith("#")):
      continue
    if buf and line.lstrip().startswith("#"):
      continue
    if not buf:
      start = no
    if line.endswith("\\"):
      buf += line[:-1] + " "
      continue
    buf += line
    word, _, args = buf.strip().partition(" ")
    if not word.isalpha():
      raise TaskFormatError(file, f"line {start}", f"expected a Dockerfile instruction, got {word!r}")
    out.append((start, word.upper(), args.strip()))
    buf = ""
  if buf:
    raise TaskFormatError(file, f"line {start}", "ends inside a line continuation")
  return out


def _exec_form(args: str) -> list[str] | None:
  if args.startswith("["):
    try:
      v = json.loads(args)
    except json.JSONDecodeError:
      return None
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
      return v
  return None


def _copy_entries(env_dir: pathlib.Path, args: str, workdir: str, file: str, field: str):
  parts = _exec_form(args) or shlex.split(args)
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


def environment_spec(task: Task, image: str, *, memory_mb: int | None = None,
                     allow_network: bool = False) -> EnvironmentSpec:
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
        argv = _exec_form(args)
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
  limits = Limits(memory_mb=memory_mb or cfg.memory_mb, disk_mb=cfg.storage_mb)
  return EnvironmentSpec(image=image, workdir=workdir, files=tuple(files), setup_commands=tuple(setup),
                         env=tuple(sorted(env.items())), limits=limits,
                         allow_network=allow_network and cfg.allow_internet)
