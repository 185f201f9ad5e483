"""Image layers: overlayfs upper dirs stacked on a base rootfs, and the steps that make them.

A layer is `<cache>/build/layers/<id>/diff` (what one build step changed: new/changed files,
overlayfs whiteouts for deletions) plus `layer.json`. An image is a base rootfs dir plus an ordered
list of layers; `mount_image` stacks them read-only with overlayfs (`lowerdir=top:...:base`).
A step runs in a private mount namespace (`unshare -m`) that mounts the stack with a fresh upper
dir, does its work through the merged view (RUN: `chroot` as root with /proc, /dev and the host's
resolv.conf, so the network reaches the package registries during the build only), and unmounts
when the namespace ends, so nothing is left mounted if the step dies.

Needs root (overlayfs, chroot, files owned by other uids); see docs/design/task-images.md for
non-root hosts.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import select
import shlex
import shutil
import subprocess
import time
import uuid

from tmax_jax.sandbox import host
from tmax_jax.sandbox.api import SandboxError
from tmax_jax.sandbox.images import base_rootfs

# Bind targets a RUN step needs that must not end up in the layer when it created them.
_SCRATCH = ("etc/resolv.conf", ".tmax-build", ".tmax-build-ca.crt")
BUILD_CA = "/.tmax-build-ca.crt"
# TLS clients of a RUN step trust the host's CA bundle (where a proxy re-signs TLS, the image's own
# bundle would not reach the registries); build-time env only, never in the image.
CA_ENV = (
  "SSL_CERT_FILE",
  "REQUESTS_CA_BUNDLE",
  "PIP_CERT",
  "CURL_CA_BUNDLE",
  "NODE_EXTRA_CA_CERTS",
  "GIT_SSL_CAINFO",
)


def host_ca_bundle() -> str | None:
  for path in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
    if path and os.path.isfile(path):
      return path
  return None


def store() -> pathlib.Path:
  return base_rootfs.cache_dir() / "build"


def layer_path(layer_id: str) -> pathlib.Path:
  return store() / "layers" / layer_id


def stale_scratch() -> list[pathlib.Path]:
  """Half-built layers (`.tmp-<id>-<pid>-<n>`) and COPY staging dirs (`<pid>-<uuid>`) of builder
  processes that died (SIGKILL) mid-step."""
  found = []
  for tmp in (store() / "layers").glob(".tmp-*"):
    pid = tmp.name.rsplit("-", 2)[-2]
    if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
      found.append(tmp)
  for stage in (store() / "staging").glob("*-*"):
    pid = stage.name.split("-", 1)[0]
    if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
      found.append(stage)
  return found


def sweep_tmp() -> list[str]:
  """Removes stale_scratch(); returns what it removed."""
  removed = []
  for path in stale_scratch():
    shutil.rmtree(path, ignore_errors=True)
    removed.append(str(path))
  return removed


def layer_done(layer_id: str) -> bool:
  return (layer_path(layer_id) / "layer.json").is_file()


def lower_dirs(base: pathlib.Path, layers: list[str]) -> list[str]:
  """overlayfs lowerdir entries (top first) for base + non-empty layers."""
  dirs = [
    str(layer_path(lid) / "diff")
    for lid in reversed(layers)
    if any((layer_path(lid) / "diff").iterdir())
  ]
  return [*dirs, str(base)]


def mount_command(
  lowers: list[str], merged: str, upper: str | None = None, work: str | None = None
) -> str:
  opts = "lowerdir=" + ":".join(lowers)
  if upper:
    opts += f",upperdir={upper},workdir={work}"
  elif len(lowers) == 1:  # overlayfs needs two lowers without an upper: a plain ro bind does it
    return f"mount --bind -o ro {shlex.quote(lowers[0])} {shlex.quote(merged)}"
  return f"mount -t overlay tmax-img -o {shlex.quote(opts)} {shlex.quote(merged)}"


def mount_image(
  base: pathlib.Path, layers: list[str], target: pathlib.Path, upper: pathlib.Path | None = None
) -> None:
  """Mounts the image at `target` (in the caller's mount namespace; runtime.remove_tree unmounts
  it with the sandbox dir): read-only, or over a writable `upper` dir (podman's runtime creates
  its own mount points in the root it is given)."""
  target.mkdir(parents=True, exist_ok=True)
  work = None
  if upper is not None:
    work = upper.parent / f"{upper.name}.work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
  cmd = mount_command(
    lower_dirs(base, layers), str(target), upper and str(upper), work and str(work)
  )
  res = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=host.host_env())
  if res.returncode != 0:
    raise SandboxError(f"mounting the image layers at {target} failed: {res.stderr.strip()}")


def run_step(
  base: pathlib.Path,
  layers: list[str],
  layer_id: str,
  body: str,
  *,
  meta: dict,
  timeout_s: float,
  log,
  network: bool = False,
  staging: pathlib.Path | None = None,
  mirror: pathlib.Path | None = None,
) -> float:
  """Makes layer `layer_id` on top of base + layers by running the sh `body` with $M = the merged
  root (and $S = `staging`, $MIRROR = `mirror` when given). Returns the seconds it took.
  Raises SandboxError with the step's output tail on failure."""
  final = layer_path(layer_id)
  tmp = final.parent / f".tmp-{layer_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
  shutil.rmtree(tmp, ignore_errors=True)
  for sub in ("diff", "work", "merged"):
    (tmp / sub).mkdir(parents=True)
  script = "\n".join(
    [
      "set -eu",
      mount_command(lower_dirs(base, layers), f"{tmp}/merged", f"{tmp}/diff", f"{tmp}/work"),
      f"M={shlex.quote(str(tmp / 'merged'))}",
      f"S={shlex.quote(str(staging or ''))}",
      f"MIRROR={shlex.quote(str(mirror or ''))}",
      f"HOST_CA={shlex.quote(host_ca_bundle() or '') if network else ''}",
      body,
    ]
  )
  argv = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--uts", "--ipc"]
  if not network:
    argv.append("--net")
  start = time.monotonic()
  try:
    proc = subprocess.Popen(
      [*argv, "sh", "-c", script],
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      env=host.host_env(),
      start_new_session=True,
    )
    tail = _stream(proc, log, start + timeout_s)
    rc = proc.wait()
    if rc != 0:
      why = "timed out" if rc == -9 else f"exit {rc}"
      raise SandboxError(f"{meta.get('where', 'build step')} failed ({why}):\n{tail[-3000:]}")
    _drop_scratch(tmp / "diff")
    seconds = time.monotonic() - start
    (tmp / "layer.json").write_text(json.dumps({**meta, "id": layer_id, "seconds": seconds}))
    for sub in ("work", "merged"):
      shutil.rmtree(tmp / sub, ignore_errors=True)
    if final.exists():  # a concurrent builder finished the same layer first
      shutil.rmtree(tmp, ignore_errors=True)
    else:
      tmp.rename(final)
    return seconds
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _stream(proc: subprocess.Popen, log, deadline: float) -> str:
  """Copies the step's output to `log` (a text file) until it exits or the deadline passes."""
  tail = b""
  fd = proc.stdout.fileno()
  while True:
    left = deadline - time.monotonic()
    if left <= 0:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)
      tail += b"\n[build step timed out]"
      break
    ready, _, _ = select.select([fd], [], [], min(left, 1.0))
    if not ready:
      continue
    chunk = os.read(fd, 65536)
    if not chunk:
      break
    log.write(chunk.decode(errors="replace"))
    log.flush()
    tail = (tail + chunk)[-8000:]
  proc.stdout.close()
  return tail.decode(errors="replace")


def _drop_scratch(diff: pathlib.Path) -> None:
  """Removes bind targets the step created itself (empty files/dirs; real content stays)."""
  for rel in _SCRATCH:
    path = diff / rel
    with contextlib.suppress(OSError):
      if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
        path.rmdir()
      elif path.is_file() and path.stat().st_size == 0:
        path.unlink()


RUN_BODY = """
mount -t proc proc "$M/proc"
mount --rbind /dev "$M/dev"
mkdir -p "$M/etc" "$M/.tmax-build"
[ -e "$M/etc/resolv.conf" ] || [ -L "$M/etc/resolv.conf" ] || : > "$M/etc/resolv.conf"
[ -L "$M/etc/resolv.conf" ] || mount --bind /etc/resolv.conf "$M/etc/resolv.conf"
[ -z "$MIRROR" ] || mount --bind -o ro "$MIRROR" "$M/.tmax-build"
if [ -n "$HOST_CA" ]; then
  : > "$M/.tmax-build-ca.crt"; mount --bind -o ro "$HOST_CA" "$M/.tmax-build-ca.crt"
fi
"""


def run_body(argv: list[str], env: dict[str, str], workdir: str, user: str | None) -> str:
  """The sh body of a RUN step: chroot into $M, cd workdir, exec argv with exactly `env`."""
  spec = ["--userspec", user] if user and user not in ("root", "0", "0:0") else []
  inner = " ".join(shlex.quote(a) for a in argv)
  if host_ca_bundle():
    env = {**{k: BUILD_CA for k in CA_ENV}, **env}
  env_args = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
  cd = f"mkdir -p {shlex.quote(workdir)} 2>/dev/null; cd {shlex.quote(workdir)} && exec {inner}"
  return (
    RUN_BODY + f'chroot {" ".join(spec)} "$M" /usr/bin/env -i {env_args} '
    f"/bin/sh -c {shlex.quote(cd)}\n"
  )
