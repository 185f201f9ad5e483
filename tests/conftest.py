"""Test-wide setup: 8 fake CPU devices for the sharding tests. XLA reads the flag once, when jax
initialises its backends, so it must be set before any test module imports jax."""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
