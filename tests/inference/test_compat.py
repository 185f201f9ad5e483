"""The JetStream 0.2.2 compatibility shim: each fix is applied and observable."""

import logging

import jax

from tmax_jax.inference import compat


def test_tree_map_alias_and_quiet_root_logger():
  root = logging.getLogger()
  root.setLevel(logging.WARNING)
  n_handlers = len(root.handlers)
  compat.apply()
  from jetstream.core import orchestrator
  assert jax.tree_map is not None
  assert jax.tree_map(lambda x: x + 1, {"a": 1}) == {"a": 2}
  # The orchestrator's own helper runs (it crashed the generate thread before the fix).
  orchestrator.delete_pytree({"a": jax.numpy.ones(3)})
  assert root.level == logging.WARNING
  assert len(root.handlers) == n_handlers
  compat.apply()  # idempotent


def test_bind_host_defaults_to_loopback_and_restores():
  compat.apply()
  from jetstream.core import server_lib
  before = server_lib._HOST
  with compat.bind_host():
    assert server_lib._HOST == "127.0.0.1"
  assert server_lib._HOST == before
