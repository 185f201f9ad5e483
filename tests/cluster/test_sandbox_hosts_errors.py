"""RunnerConfig.sandbox_hosts='ray' in a process with no Ray cluster to join: a one-line UserError
naming the address (no Ray cluster needed; a cluster without hosts: tests/cluster/
test_sandbox_hosts.py)."""

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tmax_jax.cluster import sandbox_hosts as hosts_lib  # noqa: E402
from tmax_jax.errors import UserError  # noqa: E402


def test_no_ray_cluster_at_ray_address_is_a_user_error(monkeypatch):
  if ray.is_initialized():
    pytest.skip("this process already joined a Ray cluster")
  monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
  with pytest.raises(UserError, match="127.0.0.1:1"):
    hosts_lib.shared_hosts()
  assert not ray.is_initialized()
