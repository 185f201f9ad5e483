"""Which sandbox host takes the next sandbox: least loaded, a cap on sandboxes still starting per
host, a cooldown for a host that failed (the recipe's Podman hosts: 300 s).

Pure bookkeeping (no Ray): tmax_jax/cluster/sandbox_hosts.py asks `acquire()` before it opens a
sandbox on a host and reports what became of it (`started`, `release`, `fail`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from tmax_jax.sandbox.api import SandboxError


@dataclasses.dataclass(frozen=True)
class LeasePolicy:
  """max_starting: sandboxes one host may be starting at once (a start is the expensive part:
  copying the image, setup commands); cooldown_s: how long a failed host takes none (the paper's
  300 s); wait_s: how long a lease waits for a host before the open fails."""

  max_starting: int = 4
  cooldown_s: float = 300.0
  wait_s: float = 600.0

  def __post_init__(self):
    if self.max_starting < 1:
      raise ValueError(f"LeasePolicy.max_starting={self.max_starting}; expected >= 1")
    if self.cooldown_s < 0 or self.wait_s < 0:
      raise ValueError(
        f"LeasePolicy.cooldown_s={self.cooldown_s}, wait_s={self.wait_s}; expected both >= 0"
      )


DEFAULT_POLICY = LeasePolicy()


@dataclasses.dataclass
class HostLoad:
  """One host's sandboxes: open (started, not yet closed), starting, and until when (the lease
  clock's time) it cools down after a failure."""

  open: int = 0
  starting: int = 0
  cooldown_until: float = 0.0


class Leases:
  """Thread-safe leases over `hosts` hosts (indices 0..hosts-1); `clock` is injectable so the
  cooldown can be tested without waiting."""

  def __init__(
    self, hosts: int, policy: LeasePolicy = DEFAULT_POLICY, clock: Callable[[], float] | None = None
  ):
    if hosts < 1:
      raise SandboxError("no sandbox host to lease from (expected at least one)")
    self.policy = policy
    self._clock = clock or time.monotonic
    self._loads = [HostLoad() for _ in range(hosts)]
    self._changed = threading.Condition()

  def loads(self) -> list[HostLoad]:
    """A copy of every host's load, by index."""
    with self._changed:
      return [dataclasses.replace(x) for x in self._loads]

  def cooling(self, host: int) -> bool:
    with self._changed:
      return self._loads[host].cooldown_until > self._clock()

  def _pick(self, now: float) -> int | None:
    """The least-loaded host (open + starting; ties: the lowest index) that is not cooling down
    and is below the starting cap, or None."""
    ready = [
      (x.open + x.starting, i)
      for i, x in enumerate(self._loads)
      if x.cooldown_until <= now and x.starting < self.policy.max_starting
    ]
    return min(ready)[1] if ready else None

  def acquire(self, timeout_s: float | None = None) -> int:
    """The host the next sandbox starts on (counted as starting there); waits while every host
    is cooling down or at its starting cap, `timeout_s` at most (default: policy.wait_s), then
    SandboxError."""
    wait = self.policy.wait_s if timeout_s is None else timeout_s
    deadline = self._clock() + wait
    with self._changed:
      while True:
        now = self._clock()
        host = self._pick(now)
        if host is not None:
          self._loads[host].starting += 1
          return host
        if now >= deadline:
          raise SandboxError(self._why_none(now, wait))
        cooled = [x.cooldown_until for x in self._loads if x.cooldown_until > now]
        until = min([deadline, *cooled])
        self._changed.wait(max(0.0, min(until - now, 1.0)))

  def _why_none(self, now: float, waited: float) -> str:
    states = [
      f"host {i}: cooling down {x.cooldown_until - now:.0f} s more"
      if x.cooldown_until > now
      else f"host {i}: {x.starting} starting (cap {self.policy.max_starting})"
      for i, x in enumerate(self._loads)
    ]
    return f"no sandbox host took a sandbox in {waited:g} s ({'; '.join(states)})"

  def started(self, host: int) -> None:
    """A sandbox acquired on `host` is up: open, no longer starting."""
    with self._changed:
      load = self._loads[host]
      load.starting, load.open = max(0, load.starting - 1), load.open + 1
      self._changed.notify_all()

  def release(self, host: int, *, was_open: bool) -> None:
    """A sandbox on `host` is gone: closed (`was_open`), or its start ended without one."""
    with self._changed:
      load = self._loads[host]
      if was_open:
        load.open = max(0, load.open - 1)
      else:
        load.starting = max(0, load.starting - 1)
      self._changed.notify_all()

  def fail(self, host: int) -> None:
    """`host` failed (lost, unreachable): it takes no sandbox for policy.cooldown_s from now."""
    with self._changed:
      self._loads[host].cooldown_until = self._clock() + self.policy.cooldown_s
      self._changed.notify_all()
