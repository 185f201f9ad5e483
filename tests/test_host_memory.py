"""tmax_jax.host_memory: importing tmax_jax tunes glibc malloc so XLA:CPU's per-execution temp
buffer is reused, not mmap'd afresh (page faults counted in real subprocesses)."""

import json
import os
import platform
import subprocess
import sys

import pytest

from tmax_jax import host_memory

pytestmark = pytest.mark.skipif(
  platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only"
)

# A jitted program whose temp buffer (~128 MB: two [4096, 4096] f32 intermediates) is allocated
# on an XLA worker thread at every call; -> the median minor page faults of a call after warm-up.
PROGRAM = """
import json, resource
import tmax_jax, jax, jax.numpy as jnp
from tmax_jax import host_memory
f = jax.jit(lambda x: jnp.sum(jnp.cumsum(x * 2.0, axis=0) * jnp.cumsum(x, axis=1)))
x = jnp.ones((4096, 4096), jnp.float32)
for _ in range(5):
  f(x).block_until_ready()
faults = []
for _ in range(11):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
median = sorted(faults)[5]  # not the mean: the tuned heap may still grow once, late
print(json.dumps({"applied": host_memory.reuse_freed_memory(), "faults": median}))
"""


def _run(malloc_env: str | None) -> dict:
  env = {k: v for k, v in os.environ.items() if k != host_memory.ENV}
  if malloc_env is not None:
    env[host_memory.ENV] = malloc_env
  out = subprocess.run(
    [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_reuses_the_temp_buffer_instead_of_faulting_it_in_each_call():
  tuned, default = _run(None), _run("default")
  assert tuned["applied"] and not default["applied"]
  pages = 2 * 4096 * 4096 * 4 // 4096  # the temp buffer's pages: faulted in again per call
  assert default["faults"] > pages / 2, default
  assert tuned["faults"] < pages / 20, tuned


def test_reuse_freed_memory_is_applied_once():
  assert host_memory.reuse_freed_memory() is host_memory.reuse_freed_memory()


def test_applies_where_programs_run_on_xla_cpu(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  assert host_memory.runs_on_cpu()
  monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
  assert not host_memory.runs_on_cpu()
  monkeypatch.delenv("JAX_PLATFORMS")
  monkeypatch.setattr(host_memory, "ACCELERATOR_MODULES", ("json",))  # "installed" plugin
  assert not host_memory.runs_on_cpu()
  monkeypatch.setattr(host_memory, "ACCELERATOR_MODULES", ("no_such_plugin_module",))
  assert host_memory.runs_on_cpu()
  monkeypatch.setenv(host_memory.ENV, "jemalloc")
  with pytest.raises(ValueError, match="TMAX_JAX_HOST_MALLOC='jemalloc'"):
    host_memory._apply()  # pylint: disable=protected-access
