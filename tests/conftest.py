"""Test-wide setup: 8 fake CPU devices for the sharding tests. XLA reads the flag once, when jax
initialises its backends, so it must be set before any test module imports jax."""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
# XLA:CPU aborts the process when the fake devices' threads do not all reach a collective within
# 40 s, which happens on a loaded 2-core machine; give them 15 minutes (tests spawning their own
# jax processes add these flags too).
SLOW_COLLECTIVE_FLAGS = (
  "--xla_cpu_collective_call_terminate_timeout_seconds=900 "
  "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120"
)
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
if "collective_call_terminate" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " " + SLOW_COLLECTIVE_FLAGS
# Subprocesses the tests start (launch scripts, servers, workers) import this checkout's tmax_jax,
# not whatever an editable install elsewhere points at.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
  [_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _ROOT]
)

# One compilation cache for the whole run: both pytest-xdist workers and every jax process a test
# starts (they inherit the variable) load a program another one compiled instead of compiling it
# again (the same tiny model's steps recur across files and launch scripts). The process that
# makes the directory removes it at exit; a caller's own JAX_COMPILATION_CACHE_DIR is kept.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  import atexit
  import shutil
  import tempfile

  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="tmax-test-xla-")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)

# The tests are an entry point: the malloc setting the launchers apply (host_memory), before any
# test module runs an XLA program.
from tmax_jax import host_memory  # noqa: E402

host_memory.reuse_freed_memory()


def require_base_rootfs():
  """Skips the calling test (with the reason) unless sandboxes can start from the built base
  rootfs; returns its path. Shared by every test that runs real sandboxes."""
  import pytest

  try:
    from tmax_jax.sandbox import open_sandbox  # noqa: F401
    from tmax_jax.sandbox.images import is_built, rootfs_path
  except ImportError as err:
    pytest.skip(f"sandbox backends not available: {err}")
  if not is_built(rootfs_path()):
    pytest.skip("base rootfs not built (python3 -m tmax_jax.sandbox)")
  return rootfs_path()
