"""Test-wide setup: 8 fake CPU devices for the sharding tests. XLA reads the flag once, when jax
initialises its backends, so it must be set before any test module imports jax."""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()


def require_base_rootfs():
  """Skips the calling test (with the reason) unless sandboxes can start from the built base
  rootfs; returns its path. Shared by every test that runs real sandboxes."""
  import pytest  # pylint: disable=import-outside-toplevel
  try:
    from tmax_jax.sandbox import open_sandbox  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    from tmax_jax.sandbox.images import is_built, rootfs_path  # pylint: disable=import-outside-toplevel
  except ImportError as err:
    pytest.skip(f"sandbox backends not available: {err}")
  if not is_built(rootfs_path()):
    pytest.skip("base rootfs not built (python3 -m tmax_jax.sandbox.images)")
  return rootfs_path()
