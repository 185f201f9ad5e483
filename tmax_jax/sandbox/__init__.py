"""Sandboxes for untrusted, model-written commands: `open_sandbox(spec, backend=...)`.

Backends: "bubblewrap" (namespaces, default here), "podman" (runc containers), "apptainer"
(clusters); "auto" picks apptainer when its binary is present, else bubblewrap.
"""

from __future__ import annotations

import shutil

from tmax_jax.sandbox.api import CommandResult, EnvironmentSpec, Limits, Sandbox, SandboxError

BACKENDS = ("bubblewrap", "podman", "apptainer")


def resolve_backend(backend: str = "auto") -> str:
  """"auto" -> "apptainer" when apptainer (or singularity) is installed, else "bubblewrap"."""
  if backend == "auto":
    return "apptainer" if shutil.which("apptainer") else "bubblewrap"
  if backend not in BACKENDS:
    raise SandboxError(f"unknown sandbox backend {backend!r}; expected auto or one of {', '.join(BACKENDS)}")
  return backend


def open_sandbox(spec: EnvironmentSpec, backend: str = "auto") -> Sandbox:
  """Starts a sandbox from `spec` (files copied, setup_commands run). Raises SandboxError."""
  name = resolve_backend(backend)
  if name == "bubblewrap":
    from tmax_jax.sandbox.bubblewrap import BubblewrapSandbox  # pylint: disable=import-outside-toplevel
    return BubblewrapSandbox(spec)
  if name == "podman":
    from tmax_jax.sandbox.podman import PodmanSandbox  # pylint: disable=import-outside-toplevel
    return PodmanSandbox(spec)
  from tmax_jax.sandbox.apptainer import ApptainerSandbox  # pylint: disable=import-outside-toplevel
  return ApptainerSandbox(spec)


__all__ = ["CommandResult", "EnvironmentSpec", "Limits", "Sandbox", "SandboxError", "open_sandbox",
           "resolve_backend", "BACKENDS"]
