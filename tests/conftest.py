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
# The tests' programs are tiny and most are compiled once and run a few times: compiling is most
# of the suite's time. LLVM at -O1 instead of -O3 compiles them faster and runs them about as fast
# (-O0 compiles faster still but runs the execution-bound tests 2-5x slower). It changes only the
# machine code's speed: HLO passes, buffer assignment (the memory tests) and IEEE results (XLA:CPU
# allows no fast math at any level) are the same. Measured with the malloc setting below on
# test_step + test_multi_step + test_host_memory: 110 s -> 103 s (docs/design/ci.md).
FAST_COMPILE_FLAGS = "--xla_backend_optimization_level=1"
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " " + FAST_COMPILE_FLAGS
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

# The tests are an entry point, and compile-bound: glibc malloc left as it is (host_memory's
# "default"; the launchers' reuse setting makes XLA's multi-threaded compiles slower and keeps
# every freed byte resident). The same three files: 146 s with the reuse setting, 110 s without
# (docs/design/ci.md). Test subprocesses inherit it; tests/test_host_memory.py sets the variable
# itself for the programs whose malloc it checks.
os.environ.setdefault("TMAX_JAX_HOST_MALLOC", "default")
import pytest  # noqa: E402

from tmax_jax import host_memory  # noqa: E402

host_memory.reuse_freed_memory()


def require_base_rootfs():
  """Skips the calling test (with the reason) unless sandboxes can start from the built base
  rootfs; returns its path. Shared by every test that runs real sandboxes."""
  try:
    from tmax_jax.sandbox import open_sandbox  # noqa: F401
    from tmax_jax.sandbox.images.base_rootfs import is_built, rootfs_path
  except ImportError as err:
    pytest.skip(f"sandbox backends not available: {err}")
  if not is_built(rootfs_path()):
    pytest.skip("base rootfs not built (python3 -m tmax_jax.sandbox)")
  return rootfs_path()


def _release_compiled_programs():
  """Drops jax's in-memory caches of traced and compiled programs (a later module that needs one
  again loads it from the run's compilation cache) and collects garbage: a worker runs hundreds of
  test modules, and what each compiled otherwise stays resident until the worker exits."""
  import gc
  import sys

  if "jax" in sys.modules:
    sys.modules["jax"].clear_caches()
  gc.collect()


@pytest.hookimpl(trylast=True)  # after pytest's own teardown has finalised the module's fixtures
def pytest_runtest_teardown(item, nextitem):
  if nextitem is None or nextitem.module is not item.module:
    _release_compiled_programs()
