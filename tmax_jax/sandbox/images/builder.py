"""Builds a task image from its Dockerfile: one cached layer per filesystem step.

`build_image(context_dir)` parses the Dockerfile (images/dockerfile.py), maps FROM to a locally
built base (images/base_images.py), and runs the instructions in order: RUN as root (or the USER)
in a chroot with the network on (the package registries this machine reaches), COPY/ADD of context
files, WORKDIR; ENV/ARG/USER/SHELL and the runtime-only instructions change the image config only.
Every layer's id is a hash of its parent's id, the instruction and what it depends on (the env,
workdir, user and shell a RUN sees; the bytes, modes and paths a COPY copies), so a task set whose
tasks share a base and a prefix of steps builds them once; a rebuild of an unchanged task takes no
step at all. The result, `Image`, is a base rootfs + layer list + config (env, workdir, user), with:
- a harness layer right on the base (sandbox/offline/finalize.sh: uv, pytest, offline stand-ins,
  the sandbox user), shared by every task image of that base,
- `rootfs` for bubblewrap and podman (`layers.mount_image`; podman runs it with `--rootfs`),
- `warnings` / `rewrites`: where the build deviated from the Dockerfile (unknown FROM, installer
  URLs served from the local mirror), recorded in every trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import fnmatch
import hashlib
import json
import os
import pathlib
import posixpath
import shlex
import shutil
import stat
import sys
import tarfile
import time
import uuid

import tqdm

from tmax_jax import cli, json_io
from tmax_jax.sandbox.api import SandboxError
from tmax_jax.sandbox.images import base_images, base_rootfs, dockerfile, layers, mirror
from tmax_jax.sandbox.images.dockerfile import DockerfileError
from tmax_jax.sandbox.images.image import Image

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SHELL = ("/bin/sh", "-c")
BUILD_VERSION = "1"  # part of every layer id: bump when step semantics change


@dataclasses.dataclass
class _State:
  """What the next step sees (updated by ENV/ARG/WORKDIR/USER/SHELL)."""

  env: dict
  args: dict
  workdir: str = "/"
  user: str = "root"
  shell: tuple = DEFAULT_SHELL

  def key(self) -> dict:
    return {
      "env": sorted(self.env.items()),
      "args": sorted(self.args.items()),
      "workdir": self.workdir,
      "user": self.user,
      "shell": list(self.shell),
    }

  def run_env(self) -> dict:
    env = {
      "PATH": DEFAULT_PATH,
      "HOME": "/root" if self.user in ("root", "0") else "/tmp",
      **self.args,
      **self.env,
    }
    return env


def _hash(*parts) -> str:
  digest = hashlib.sha256()
  for part in parts:
    digest.update(json.dumps(part, sort_keys=True, default=str).encode() + b"\0")
  return digest.hexdigest()[:20]


def build_image(
  context: str | os.PathLike,
  *,
  dockerfile_name: str = "Dockerfile",
  extra_steps: tuple[str, ...] = (),
  timeout_s: float = 1800.0,
  quiet: bool = True,
  seeds_into_workdir: bool = False,
  seeds_default_dir: str = "/",
  finalize: bool = True,
) -> Image:
  """Builds (or finds cached) the image of `context`/Dockerfile. `extra_steps`: shell commands run
  as root after the Dockerfile (e.g. test-time dependency prefetch), logged as rewrites.
  `seeds_into_workdir`: context/seeds/ is copied into the WORKDIR (into `seeds_default_dir` when the
  Dockerfile leaves it at /: the task's sandbox starts there then, not in /).
  Raises DockerfileError (bad Dockerfile, naming the line) or SandboxError (a failed step)."""
  if os.geteuid() != 0:
    raise SandboxError(
      "building task images needs root (overlayfs + chroot); see docs/design/task-images.md "
      "for non-root hosts"
    )
  context = pathlib.Path(context).resolve()
  file = context / dockerfile_name
  if not file.is_file():
    raise SandboxError(f"{file}: no Dockerfile to build")
  ins = dockerfile.instructions(file.read_text(encoding="utf-8"), str(file))
  start = time.monotonic()
  (layers.store() / "layers").mkdir(parents=True, exist_ok=True)
  layers.sweep_tmp()
  builder = _Builder(context, str(file), timeout_s, quiet)
  seeds = (seeds_default_dir or "/") if seeds_into_workdir else None
  try:
    builder.run(ins, extra_steps, seeds, finalize)
  except (
    base_images.StandInBuildError
  ):  # already attributed (the stand-in base itself did not build)
    raise
  except SandboxError as err:  # a failed step: name the stand-in's deviations that explain it
    raise base_images.attribute_failure(err, builder.base_name) from None
  image = builder.image(time.monotonic() - start)
  json_io.write_text_atomic(image.path, [image.to_json()])  # tasks of one set build in threads
  return image


def ensure_base(
  base: base_images.Base, *, quiet: bool = True
) -> tuple[pathlib.Path, tuple[str, ...], str]:
  """-> (rootfs dir, layer ids on top of it, an id naming both). Builds what is missing."""
  if base.name == "tmax-base":
    root = base_rootfs.ensure_base_rootfs(quiet=quiet)
    return root, (), f"tmax-base:{root.name}"
  if base.name.startswith("debootstrap-"):
    root = base_rootfs.ensure_debootstrap(base.suite, quiet=quiet)
    return root, (), f"{base.name}:{root.name}"
  image = build_image(
    base_images.recipes_dir(),
    dockerfile_name=f"{base.name}/Dockerfile",
    quiet=quiet,
    finalize=False,
  )
  return pathlib.Path(image.base), image.layers, f"{base.name}:{image.id}"


class _Builder:
  """Runs the instructions of one Dockerfile; see build_image."""

  def __init__(self, context: pathlib.Path, file: str, timeout_s: float, quiet: bool):
    self.context, self.file, self.timeout_s, self.quiet = context, file, timeout_s, quiet
    self.state = _State(env={}, args={})
    self.base: pathlib.Path | None = None
    self.base_id = ""
    self.base_name = ""
    self.from_ref = ""
    self.layers: list[str] = []
    self.warnings: list[str] = []
    self.rewrites: list[str] = []
    self.steps: list[dict] = []
    self.meta: dict = {}

  def fail(self, line: int, problem: str):
    raise DockerfileError(self.file, line, problem)

  def run(
    self,
    ins: list[dockerfile.Instruction],
    extra: tuple[str, ...],
    seeds: str | None,
    finalize: bool,
  ) -> None:
    global_args: dict = {}
    steps = cli.progress(ins, desc=f"build {self.context.name}", unit="step", disable=self.quiet)
    for i in steps:
      if i.cmd == "FROM":
        if self.base is not None:
          self.fail(i.line, "multi-stage builds (a second FROM) are not supported")
        self._from(i, global_args)
        if finalize:  # right on the base, so every task image of that base shares it
          self._run_shell(
            ["/bin/sh", "/.tmax-build/finalize.sh"],
            0,
            "harness layer",
            user="root",
            mirror_dir=mirror.harness_dir(),
          )
      elif self.base is None:
        if i.cmd != "ARG":
          self.fail(i.line, f"{i.cmd} before FROM (only ARG may come first)")
        global_args.update(dockerfile.key_values(i, global_args, self.file))
      else:
        self._step(i)
    if self.base is None:
      raise DockerfileError(self.file, 1, "no FROM instruction")
    if seeds and (self.context / "seeds").is_dir() and not self._copies_seeds(ins):
      dest = self.state.workdir if self.state.workdir != "/" else seeds
      self._copy(dockerfile.Instruction(0, "COPY", f"seeds/ {dest.rstrip('/')}/"), "COPY")
    for n, cmd in enumerate(extra):
      self.rewrites.append(f"added build step: {cmd}")
      self._run_shell(["/bin/sh", "-c", cmd], 0, f"extra step {n}", user="root")

  def _copies_seeds(self, ins) -> bool:
    return any(i.cmd in ("COPY", "ADD") and "seeds" in i.args for i in ins)

  def _from(self, i, global_args: dict) -> None:
    if i.flag("platform") and "amd64" not in i.flag("platform"):
      self.warnings.append(
        f"line {i.line}: FROM --platform={i.flag('platform')} built for the host's architecture"
      )
    self.from_ref = dockerfile.parse_from(i, global_args, self.file)
    base = base_images.resolve(self.from_ref)
    if base.warning:
      self.warnings.append(f"line {i.line}: {base.warning}")
    self.base_name = base.name
    try:
      self.base, base_layers, self.base_id = ensure_base(base, quiet=self.quiet)
    except (SandboxError, DockerfileError) as err:
      raise base_images.StandInBuildError(base.name, [base_images.BASE_BUILD], err) from None
    self.layers = list(base_layers)
    self.state.env.setdefault("PATH", DEFAULT_PATH)  # `ENV PATH=/x:$PATH` extends Docker's default
    self.state.env.update(dict(base.env))
    self.state.workdir = base.workdir

  def _step(self, i) -> None:
    st = self.state
    if i.cmd == "RUN":
      if i.flag("mount") is not None:
        self.fail(i.line, "RUN --mount is not supported")
      argv = dockerfile.exec_form(i.args)
      self._run_shell(argv or [*st.shell, i.args], i.line, f"line {i.line} RUN")
    elif i.cmd in ("COPY", "ADD"):
      if i.flag("from") is not None:
        self.fail(i.line, "COPY --from (multi-stage) is not supported")
      self._copy(i, i.cmd)
    elif i.cmd == "WORKDIR":
      path = dockerfile.substitute(i.args.strip(), {**st.args, **st.env})
      st.workdir = posixpath.normpath(posixpath.join(st.workdir, path))
      self._run_shell(
        ["/bin/mkdir", "-p", st.workdir], i.line, f"line {i.line} WORKDIR", user="root"
      )
    elif i.cmd == "ENV":
      st.env.update(dockerfile.key_values(i, {**st.args, **st.env}, self.file))
    elif i.cmd == "ARG":
      for k, v in dockerfile.key_values(i, {**st.args, **st.env}, self.file):
        st.args[k] = v or st.args.get(k, v)
    elif i.cmd == "USER":
      st.user = dockerfile.substitute(i.args.strip(), {**st.args, **st.env})
    elif i.cmd == "SHELL":
      argv = dockerfile.exec_form(i.args)
      if not argv:
        self.fail(
          i.line, f'SHELL expects the JSON form ["executable", "parameters"], got {i.args!r}'
        )
      st.shell = tuple(argv)
    else:
      self.meta[i.cmd] = i.args  # runtime-only: recorded, not built

  def _run_shell(
    self,
    argv: list[str],
    line: int,
    where: str,
    *,
    user: str | None = None,
    mirror_dir: pathlib.Path | None = None,
  ) -> None:
    st = self.state
    user = user or st.user
    text = " ".join(argv)
    urls = mirror.prepare(text)
    for url, local in urls:
      self.rewrites.append(
        f"{where}: {url} "
        + (
          f"replaced by the offline stand-in {local}"
          if local.startswith("bin/")
          else f"served from the local mirror ({local})"
        )
      )
    key = {
      "v": BUILD_VERSION,
      "cmd": "RUN",
      "argv": argv,
      "state": st.key(),
      "user": user,
      "mirror": mirror.served_hash(urls) if urls else "",
    }
    if mirror_dir is not None:
      key["harness"] = mirror.harness_hash()
    env = st.run_env()
    if urls:
      env["PATH"] = "/.tmax-build/bin:" + env["PATH"]
    body = layers.run_body(argv, env, st.workdir, self._uid(user))
    self._layer(
      key,
      body,
      where,
      line,
      network=True,
      mirror_dir=mirror_dir or (mirror.build_dir() if urls else None),
    )

  def _uid(self, user: str) -> str | None:
    if user in ("root", "0", "0:0", ""):
      return None
    name, _, group = user.partition(":")
    return (
      f"{self._lookup('passwd', name)}:{self._lookup('group', group) if group else ''}".rstrip(":")
      if not name.isdigit() or (group and not group.isdigit())
      else user
    )

  def _lookup(self, db: str, name: str) -> str:
    if name.isdigit():
      return name
    for lid in reversed(self.layers):
      path = layers.layer_path(lid) / "diff" / "etc" / db
      if path.is_file():
        break
    else:
      path = self.base / "etc" / db
    for row in path.read_text(errors="replace").splitlines():
      parts = row.split(":")
      if parts[0] == name and len(parts) > 2:
        return parts[2]
    raise SandboxError(f"{self.file}: USER/--chown {name!r} is not in the image's /etc/{db}")

  def _layer(
    self,
    key: dict,
    body: str,
    where: str,
    line: int,
    *,
    network: bool,
    staging: pathlib.Path | None = None,
    mirror_dir: pathlib.Path | None = None,
  ) -> None:
    parent = self.layers[-1] if self.layers else self.base_id
    layer_id = _hash(parent, key)
    with _layer_lock(layer_id):  # concurrent builders of the same layer (threads, processes) wait
      seconds, cached = self._make_layer(
        layer_id, parent, body, where, network, staging, mirror_dir
      )
    self.layers.append(layer_id)
    self.steps.append(
      {
        "line": line,
        "where": where,
        "layer": layer_id,
        "cached": cached,
        "seconds": round(seconds, 2),
      }
    )

  def _make_layer(self, layer_id, parent, body, where, network, staging, mirror_dir):
    cached = layers.layer_done(layer_id)
    seconds = 0.0
    if not cached:
      if not self.quiet:  # through tqdm: the line goes above the build's progress bar
        tqdm.tqdm.write(f"[build] {where}", file=sys.stderr)
      log_path = layers.store() / "logs" / f"{layer_id}.log"
      log_path.parent.mkdir(parents=True, exist_ok=True)
      with open(log_path, "w") as log:
        seconds = layers.run_step(
          self.base,
          self.layers,
          layer_id,
          body,
          meta={"where": f"{self.file}: {where}", "parent": parent},
          timeout_s=self.timeout_s,
          log=log,
          network=network,
          staging=staging,
          mirror=mirror_dir,
        )
    return seconds, cached

  def _copy(self, i, cmd: str) -> None:
    st = self.state
    env = {**st.args, **st.env}
    srcs, dest = dockerfile.copy_args(i, env, self.file)
    dest_abs = posixpath.normpath(posixpath.join(st.workdir, dest))
    into_dir = dest.endswith("/") or len(srcs) > 1 or dest in (".", "./")
    chown = i.flag("chown")
    owner = self._owner(chown) if chown else "0:0"
    staging = layers.store() / "staging" / f"{os.getpid()}-{uuid.uuid4().hex}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
      digest = hashlib.sha256()
      plan = []
      for n, src in enumerate(srcs):
        if "://" in src:
          self.fail(
            i.line,
            f"{cmd} of a URL ({src}) cannot be fetched offline; put the file in the build context",
          )
        matches = self._glob(src, i.line)
        for m, host in enumerate(matches):
          out = staging / f"{n}-{m}"
          extract = cmd == "ADD" and host.is_file() and _is_tar(host)
          _stage(host, out, extract)
          digest.update(_tree_digest(out).encode())
          is_dir = host.is_dir() or extract
          target = (
            dest_abs
            if is_dir or not into_dir and len(matches) == 1
            else posixpath.join(dest_abs, host.name)
          )
          plan.append((out.name, target, is_dir, host.name))
      chmod = i.flag("chmod")
      body = [f'chown -R {owner} "$S"']
      if chmod:
        body.append(f'chmod -R {shlex.quote(chmod)} "$S"/*/*')
      for name, target, is_dir, base_name in plan:
        t = shlex.quote(target)
        if is_dir:  # --no-overwrite-dir: existing dirs (e.g. /tmp) keep their mode and owner
          body.append(
            f'mkdir -p "$M"{t}; tar -C "$S/{name}" -cf - . | '
            f'tar -C "$M"{t} -xpf - --no-overwrite-dir'
          )
        else:  # a file onto an existing dir goes inside it, else to that path
          f = shlex.quote(base_name)
          body.append(
            f'if [ -d "$M"{t} ] && [ ! -L "$M"{t} ]; then '
            f'cp -a "$S/{name}/"{f} "$M"{t}/; '
            f'else mkdir -p "$M"$(dirname {t}); cp -a "$S/{name}/"{f} "$M"{t}; fi'
          )
      key = {
        "v": BUILD_VERSION,
        "cmd": cmd,
        "plan": plan,
        "content": digest.hexdigest(),
        "owner": owner,
        "chmod": chmod,
      }
      self._layer(
        key, "\n".join(body), f"line {i.line} {cmd}", i.line, network=False, staging=staging
      )
    finally:
      shutil.rmtree(staging, ignore_errors=True)

  def _owner(self, chown: str) -> str:
    user, _, group = chown.partition(":")
    uid = self._lookup("passwd", user)
    gid = self._lookup("group", group) if group else uid
    return f"{uid}:{gid}"

  def _glob(self, src: str, line: int) -> list[pathlib.Path]:
    ctx = self.context
    rel = src.lstrip("/")
    if any(c in rel for c in "*?["):
      found = sorted(p for p in ctx.glob(rel) if _inside(p, ctx))
    else:
      p = (ctx / rel).resolve() if rel not in ("", ".") else ctx
      found = [p] if p.exists() and _inside(p, ctx) else []
    found = [p for p in found if not _ignored(ctx, p)]
    if not found:
      self.fail(line, f"COPY source {src!r} does not exist in the build context {ctx}")
    return found

  def image(self, seconds: float) -> Image:
    st = self.state
    env = {"PATH": DEFAULT_PATH, **st.env}
    runtime = tuple(sorted(self.meta.items()))
    # (no runtime instructions: the id images had before they were recorded)
    image_id = _hash(
      self.base_id,
      self.layers,
      sorted(env.items()),
      st.workdir,
      st.user,
      *([runtime] if runtime else []),
    )
    return Image(
      id=image_id,
      base=str(self.base),
      layers=tuple(self.layers),
      env=tuple(sorted(env.items())),
      workdir=st.workdir,
      user=st.user,
      from_ref=self.from_ref,
      warnings=tuple(self.warnings),
      rewrites=tuple(self.rewrites),
      steps=tuple(self.steps),
      build_seconds=round(seconds, 2),
      runtime=runtime,
    )


@contextlib.contextmanager
def _layer_lock(layer_id: str):
  locks = layers.store() / "locks"
  locks.mkdir(parents=True, exist_ok=True)
  with open(locks / f"{layer_id}.lock", "w") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    yield


def _inside(path: pathlib.Path, ctx: pathlib.Path) -> bool:
  return path.resolve() == ctx or path.resolve().is_relative_to(ctx)


def _ignored(ctx: pathlib.Path, path: pathlib.Path) -> bool:
  ignore = ctx / ".dockerignore"
  if not ignore.is_file():
    return False
  rel = path.resolve().relative_to(ctx).as_posix()
  pats = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and ln[0] != "#"]
  return any(fnmatch.fnmatch(rel, p.strip("/")) for p in pats if not p.startswith("!"))


def _is_tar(path: pathlib.Path) -> bool:
  return tarfile.is_tarfile(path)


def _stage(src: pathlib.Path, out: pathlib.Path, extract: bool) -> None:
  """Copies `src` to staging with git's mode model (dirs 0755, files 0644, or 0755 when any x
  bit is set): build contexts are often stored without write bits (read-only checkouts)."""
  if extract:
    out.mkdir()
    with tarfile.open(src) as tar:
      tar.extractall(out, filter="tar")
  elif src.is_dir():
    shutil.copytree(src, out, symlinks=True)
  else:
    out.mkdir()
    shutil.copy2(src, out / src.name, follow_symlinks=True)
  for p in [out, *out.rglob("*")]:
    if p.is_symlink():
      continue
    mode = p.stat().st_mode
    if p.is_dir():
      p.chmod(0o755)
    else:
      p.chmod(0o755 if mode & 0o111 else 0o644)


def _tree_digest(root: pathlib.Path) -> str:
  digest = hashlib.sha256()
  for p in sorted(root.rglob("*")):
    rel = p.relative_to(root).as_posix()
    st = p.lstat()
    digest.update(f"{rel}\0{stat.S_IMODE(st.st_mode):o}\0".encode())
    if p.is_symlink():
      digest.update(os.readlink(p).encode())
    elif p.is_file():
      digest.update(hashlib.sha256(p.read_bytes()).digest())
  return digest.hexdigest()


def prune(max_age_days: float) -> list[str]:
  """Deletes image records not used for `max_age_days` (file mtime; `build_image` rewrites the
  record on every build) and every layer no remaining record references. Returns what went."""
  root = layers.store()
  cutoff = time.time() - max_age_days * 86400
  removed, keep = [], set()
  for rec in sorted((root / "images").glob("*.json")):
    if rec.stat().st_mtime < cutoff:
      rec.unlink()
      removed.append(str(rec))
    else:
      keep.update(json.loads(rec.read_text()).get("layers", ()))
  for layer in (root / "layers").iterdir() if (root / "layers").is_dir() else ():
    if not layer.name.startswith(".") and layer.name not in keep:
      shutil.rmtree(layer, ignore_errors=True)
      removed.append(str(layer))
  return removed


def failed_step_message(error: SandboxError) -> str:
  """A failed build in the error path's few lines: the failing step (the first line: the
  Dockerfile and line) and the last line of its output, the one that usually says why."""
  head, _, output = str(error).partition("\n")
  lines = [line for line in output.splitlines() if line.strip()]
  return f"{head}\n{lines[-1].strip()}" if lines else head
