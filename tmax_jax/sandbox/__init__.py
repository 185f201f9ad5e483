"""Sandboxes for untrusted, model-written commands: `open_sandbox(spec, backend=...)`.

Backends: "bubblewrap" (namespaces, default here), "podman" (runc containers), "apptainer"
(clusters); "auto" picks apptainer when its binary is present, else bubblewrap. Several containers
on one network (a task's multi-service compose file): `open_pod(PodSpec)`, podman only.

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.sandbox`, import the names
below from here, and the public modules listed in `__all__` whole; api.py, base.py, host.py and
transfer.py are internal (api's records are re-exported here).
"""

from __future__ import annotations

import shutil

from tmax_jax.sandbox.api import (
  CommandResult,
  EnvironmentSpec,
  HealthCheck,
  Limits,
  Mount,
  PodSpec,
  Sandbox,
  SandboxError,
  ServiceSpec,
)
from tmax_jax.sandbox.transfer import place

BACKENDS = ("bubblewrap", "podman", "apptainer")


def resolve_backend(backend: str = "auto") -> str:
  """Backend "auto": "apptainer" when apptainer (or singularity) is installed, else "bubblewrap"."""
  if backend == "auto":
    return "apptainer" if shutil.which("apptainer") else "bubblewrap"
  if backend not in BACKENDS:
    raise SandboxError(
      f"unknown sandbox backend {backend!r}; expected auto or one of {', '.join(BACKENDS)}"
    )
  return backend


def open_sandbox(spec: EnvironmentSpec, backend: str = "auto") -> Sandbox:
  """Starts a sandbox from `spec` (files copied, setup_commands run). Raises SandboxError."""
  name = resolve_backend(backend)
  if name == "bubblewrap":
    # a backend loads when used: `import tmax_jax.sandbox.api` stays light
    from tmax_jax.sandbox.backends.bubblewrap import BubblewrapSandbox  # noqa: PLC0415

    return BubblewrapSandbox(spec)
  if name == "podman":
    from tmax_jax.sandbox.backends.podman import PodmanSandbox  # noqa: PLC0415  (loads on use)

    return PodmanSandbox(spec)
  from tmax_jax.sandbox.backends.apptainer import ApptainerSandbox  # noqa: PLC0415  (on use)

  return ApptainerSandbox(spec)


def pod_unsupported(backend: str = "auto") -> str | None:
  """None when `backend` can start a PodSpec here, else the reason it cannot."""
  name = resolve_backend(backend)
  if name != "podman":
    return (
      f"the {name} backend runs one container per trial; several containers on one network "
      "run as a podman pod (backend 'podman')"
    )
  from tmax_jax.sandbox.backends import podman  # noqa: PLC0415  (backends load on use)

  reason = podman.podman_available()
  return f"podman cannot run pods here: {reason}" if reason else None


def open_pod(spec: PodSpec, backend: str = "podman") -> Sandbox:
  """Starts a pod: the main sandbox (spec.main) and spec.services (sandbox/backends/pod.py). Raises
  SandboxError, also when `backend` cannot run pods (pod_unsupported says why)."""
  reason = pod_unsupported(backend)
  if reason:
    raise SandboxError(reason)
  from tmax_jax.sandbox.backends.pod import PodmanPod  # noqa: PLC0415  (backends load on use)

  return PodmanPod(spec)


__all__ = [
  # starting sandboxes and pods
  "BACKENDS",
  "open_pod",
  "open_sandbox",
  "pod_unsupported",
  "resolve_backend",
  # what a sandbox is given and gives back
  "CommandResult",
  "EnvironmentSpec",
  "HealthCheck",
  "Limits",
  "Mount",
  "PodSpec",
  "Sandbox",
  "SandboxError",
  "ServiceSpec",
  "place",  # a file or directory copied to where Sandbox.download puts it (remote sandboxes)
  # public modules: the process's sandbox services and protocols, used whole
  "backends",  # each backend's own tools (podman's images, the hardened run arguments)
  "census",  # what sandboxes leave on the host and the sweep of dead owners'
  "cgroups",  # per-sandbox cgroups (v1 / v2)
  "pool",  # SandboxPool: a bounded pool for parallel rollouts
  "runtime",  # process-wide housekeeping: temp roots, cleanup on exit, the stale sweeper
  "shell",  # the persistent-shell protocol, for other sandbox kinds (Harbor's)
  "status",  # a command's status from the host's evidence
  # the other room: building images (its own face)
  "images",
]
