"""Host (CPU) memory reuse for XLA:CPU programs: glibc malloc tuned so freed buffers are reused.

XLA:CPU allocates each execution's temp buffer (the whole program's scratch, e.g. 110 MB for
bench/train_step.py's step) on a worker thread and frees it at the end. glibc serves a worker
thread from its own arena, whose heaps are at most 64 MB, so every allocation above that is a
fresh mmap and every free a munmap: the next step touches new pages again (measured: ~28,000 page
faults and ~55 ms of kernel time per train step on 2 cores, ~12% of its wall time;
docs/design/host-memory.md). With one arena, no mmap'd chunks and a high trim threshold, the
freed buffer stays in the heap and the next execution reuses it, with no page faults.

`reuse_freed_memory()` applies that once per process; entry points call it first thing (the
launchers' main(), the bench scripts, the tests' conftest), never an import of the library. It
must run before XLA's worker threads make their first allocation (threads keep the arena they
started with), i.e. before the first jax computation. The cost: memory freed by the process is
kept for reuse instead of returned to the OS (peak RSS stays allocated), and every thread shares
one malloc arena, which makes XLA's multi-threaded compiles ~1.35x slower
(docs/design/host-memory.md). So it
applies where programs run on XLA:CPU: not when an accelerator plugin (jax_plugins/*, libtpu) is
installed, unless JAX_PLATFORMS=cpu. TMAX_JAX_HOST_MALLOC=default never applies it, =reuse always
does (on glibc; a no-op elsewhere); set it to default for compile-bound work. (An environment
variable, not a config field: it must be decided per process before anything allocates, including
in the bench's worker processes.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import platform

ENV = "TMAX_JAX_HOST_MALLOC"  # "default": leave glibc malloc as it is; "reuse": always tune it
ACCELERATOR_MODULES = ("jax_plugins", "libtpu")  # where jax finds GPU / TPU backends
# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
SETTINGS = (
  (M_ARENA_MAX, 1),  # every thread allocates from the main heap (no 64 MB per-thread heaps)
  (M_MMAP_MAX, 0),  # large blocks come from the heap, not from a fresh mmap each time
  (M_TRIM_THRESHOLD, 2**31 - 1),  # freed memory at the heap's top is kept, not given back
)
_applied: bool | None = None


def reuse_freed_memory() -> bool:
  """Tunes glibc malloc as the module docstring says; -> whether the settings are in effect."""
  global _applied
  if _applied is None:
    _applied = _apply()
  return _applied


def runs_on_cpu() -> bool:
  """Whether this process's jax programs will run on XLA:CPU (read without starting jax)."""
  platforms = os.environ.get("JAX_PLATFORMS", "")
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  return not any(importlib.util.find_spec(m) for m in ACCELERATOR_MODULES)


def _apply() -> bool:
  choice = os.environ.get(ENV, "")
  if choice not in ("", "default", "reuse"):
    raise ValueError(f"{ENV}={choice!r}; expected 'default', 'reuse' or unset")
  if choice == "default" or (choice == "" and not runs_on_cpu()):
    return False
  if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
    return False
  libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
  return all(libc.mallopt(param, value) == 1 for param, value in SETTINGS)
