"""A bounded pool of sandboxes for parallel rollouts (thread-safe and asyncio-friendly).

At most `size` sandboxes are alive at once. `session(spec)` / `asession(spec)` starts one (retrying
a start whose health check fails), yields it and always closes it: on success, exception,
cancellation or timeout. Closing the pool closes whatever is still open; process exit and fatal
signals do the same (runtime.close_all), and `sweep()` removes leftovers of crashed processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from tmax_jax.sandbox import census, open_sandbox
from tmax_jax.sandbox.api import EnvironmentSpec, Sandbox, SandboxError


class SandboxPool:
  """N sandboxes in parallel; see the module docstring."""

  def __init__(
    self,
    size: int,
    backend: str = "auto",
    *,
    start_retries: int = 2,
    opener: Callable[[EnvironmentSpec, str], Sandbox] | None = None,
  ):
    if not isinstance(size, int) or size <= 0:
      raise SandboxError(f"SandboxPool size must be a positive int, got {size!r}")
    self.size = size
    self.backend = backend
    self.start_retries = start_retries
    self._opener = opener or (lambda spec, backend: open_sandbox(spec, backend=backend))
    self._slots = threading.BoundedSemaphore(size)
    self._lock = threading.Lock()
    self._open: set = set()
    self._closed = False

  @staticmethod
  def healthy(sb: Sandbox) -> bool:
    try:
      res = sb.run("echo tmax-health", timeout_s=20)
    except SandboxError:
      return False
    return res.status == "ok" and res.output.strip() == "tmax-health"

  def _start(self, spec: EnvironmentSpec) -> Sandbox:
    errors = []
    for _ in range(1 + self.start_retries):
      try:
        sb = self._opener(spec, self.backend)
      except SandboxError as err:
        errors.append(str(err))
        if "malformed" in str(err) or "does not exist" in str(err):
          break  # bad input: retrying cannot help
        continue
      if self.healthy(sb):
        return sb
      sb.close()
      errors.append("health check failed")
    raise SandboxError(f"could not start a healthy sandbox: {'; '.join(errors)}")

  def _check_open(self) -> None:
    if self._closed:
      raise SandboxError("the sandbox pool is closed")

  def _start_tracked(self, spec: EnvironmentSpec) -> Sandbox:
    sb = self._start(spec)
    with self._lock:
      self._open.add(sb)
    return sb

  def _untrack(self, sb: Sandbox | None) -> bool:
    """Forgets a started sandbox -> whether there was one (to close)."""
    if sb is None:
      return False
    with self._lock:
      self._open.discard(sb)
    return True

  @contextlib.contextmanager
  def session(self, spec: EnvironmentSpec):
    """Blocks for a free slot, yields a started sandbox, always closes it."""
    self._check_open()
    self._slots.acquire()
    sb = None
    try:
      sb = self._start_tracked(spec)
      yield sb
    finally:
      if self._untrack(sb):
        sb.close()
      self._slots.release()

  @contextlib.asynccontextmanager
  async def asession(self, spec: EnvironmentSpec):
    """Async variant: waits for a slot and starts/closes the sandbox in worker threads."""
    self._check_open()
    await asyncio.to_thread(self._slots.acquire)
    sb = None
    try:
      sb = await asyncio.to_thread(self._start_tracked, spec)
      yield sb
    finally:
      if self._untrack(sb):
        await asyncio.shield(asyncio.to_thread(sb.close))
      self._slots.release()

  @property
  def in_use(self) -> int:
    with self._lock:
      return len(self._open)

  def close(self) -> None:
    self._closed = True
    with self._lock:
      live = list(self._open)
    for sb in live:
      with contextlib.suppress(Exception):
        sb.close()

  def __enter__(self) -> SandboxPool:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  @staticmethod
  def sweep() -> list[str]:
    """Removes temp dirs, cgroups, containers and instances left by dead processes."""
    return census.sweep()
