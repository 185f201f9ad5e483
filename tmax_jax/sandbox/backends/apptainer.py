"""The Apptainer backend (clusters; the binary cannot be installed on our own machines).

`apptainer instance start --containall --cleanenv --writable-tmpfs --no-home --net --network none`
with the same writable binds as the other backends, then `apptainer exec instance://NAME` for the
shell and fresh processes, under prlimit (memory / file size / processes / CPU). As root, the
instance drops to uid 1000 with `--security uid:1000,gid:1000`; `--memory` / `--pids-limit` add
cgroup limits where the cluster allows them. The image is a .sif or a rootfs directory (so
ensure_base_rootfs() works directly), or build base.sif from sandbox/base.def.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

from tmax_jax.sandbox import base, runtime
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError


def apptainer_binary() -> str | None:
  return shutil.which("apptainer") or shutil.which("singularity")


class ApptainerSandbox(base.SandboxBase):
  """See the module docstring."""

  backend = "apptainer"

  def __init__(self, spec: EnvironmentSpec, *, binary: str | None = None):
    self.binary = binary or apptainer_binary()
    if self.binary is None:
      raise SandboxError(
        "apptainer backend unavailable: neither apptainer nor singularity is installed"
      )
    image = pathlib.Path(spec.image) if isinstance(spec.image, str) and spec.image else None
    if image is None or not image.exists():
      raise SandboxError(
        f"apptainer: EnvironmentSpec.image {spec.image!r} does not exist "
        "(expected a .sif file or a rootfs directory)"
      )
    super().__init__(spec)

  @property
  def instance(self) -> str:
    return f"tmax-{self.name}"

  def start_args(self) -> list[str]:
    """The `apptainer instance start` argv of the anchor instance."""
    lim = self.spec.limits
    args = [
      self.binary,
      "instance",
      "start",
      "--containall",
      "--cleanenv",
      "--writable-tmpfs",
      "--no-home",
      "--no-mount",
      "hostfs,cwd",
    ]
    args += ["--net", "--network", "none"] if not self.spec.allow_network else []
    if os.geteuid() == 0:
      args += [
        "--security",
        f"uid:{base.SANDBOX_UID},gid:{base.SANDBOX_UID}",
        "--memory",
        f"{lim.memory_mb}M",
        "--pids-limit",
        str(lim.max_processes),
      ]
    for target, host in sorted(self.binds.items()):
      args += ["--bind", f"{host}:{target}:rw"]
    args += [str(pathlib.Path(self.spec.image).resolve()), self.instance]
    return args

  def _start_anchor(self) -> None:
    res = subprocess.run(
      [*self._prlimit(), *self.start_args()],
      capture_output=True,
      timeout=base.START_TIMEOUT_S,
      check=False,
      env=self._host_env(),
    )
    if res.returncode != 0:
      raise SandboxError(
        f"apptainer instance start failed for {self.spec.image}: "
        f"{res.stderr.decode(errors='replace').strip()[-1500:]}"
      )

  def stop_args(self) -> list[str]:
    return [self.binary, "instance", "stop", "--signal", "KILL", self.instance]

  def _stop_anchor(self) -> None:
    subprocess.run(
      self.stop_args(), capture_output=True, timeout=60, check=False, env=self._host_env()
    )

  def _enter(self, argv: list[str], *, root: bool = False) -> list[str]:
    return [
      *self._in_cgroup(self._prlimit()),
      self.binary,
      "exec",
      "--cleanenv",
      "--pwd",
      self.spec.workdir,
      f"instance://{self.instance}",
      *argv,
    ]


def sweep_stale_instances(binary: str | None = None) -> list[str]:
  """Stops tmax instances whose owner process died (instances outlive their parent)."""
  binary = binary or apptainer_binary()
  if binary is None:
    return []
  res = subprocess.run([binary, "instance", "list"], capture_output=True, text=True, check=False)
  stopped = []
  for line in res.stdout.splitlines()[1:]:
    name = line.split()[0] if line.split() else ""
    if name.startswith("tmax-p"):
      owner = "-".join(name[len("tmax-") :].split("-")[:2])
      if not runtime._tag_alive(owner):
        subprocess.run(
          [binary, "instance", "stop", "--signal", "KILL", name], capture_output=True, check=False
        )
        stopped.append(name)
  return stopped
