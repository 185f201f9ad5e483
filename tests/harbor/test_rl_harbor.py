"""Harbor environments under our loop (slow): two steps of the tiny RL job with every episode in
Harbor's podman environment (RunnerConfig.backend "harbor:podman" through the Harbor bridge): our
harness, limits and status classification, Harbor's environment API."""

import time

import numpy as np
import pytest

from tests.conftest import require_base_rootfs
from tests.harbor.harbor_helpers import require_harbor, require_podman
from tests.loop.rl_helpers import tiny_rl_config
from tmax_jax.loop.rl import run_rl
from tmax_jax.sandbox.backends import podman
from tmax_jax.tasks.runner import RunnerConfig

pytestmark = pytest.mark.slow


def _harbor_containers_started(since: float) -> set[str]:
  """Names of the containers Harbor's compose started since `since` (podman's event log)."""
  res = podman.run_podman(
    ["events", "--stream=false", "--since", str(int(since)), "--filter", "event=start"]
    + ["--format", "{{.Name}}"],
    timeout=60,
  )
  return {n for n in res.stdout.decode().split() if n.startswith("harbor-")}


def test_two_rl_steps_in_harbor_podman(tmp_path):
  require_harbor()
  require_podman()
  require_base_rootfs()
  start = time.time()
  result = run_rl(
    tiny_rl_config(tmp_path / "run", steps=2, runner=RunnerConfig(backend="harbor:podman"))
  )
  assert [m["step"] for m in result.metrics] == [1, 2]
  assert all(np.isfinite(m["loss"]) for m in result.metrics)
  last = result.metrics[-1]
  assert last["rollout/groups_generated"] >= 2
  assert last.get("rollout/groups_dropped_error", 0) == 0  # no episode failed in its sandbox
  assert all(m["turns_mean"] >= 1 for m in result.metrics)
  # every episode ran in a container of Harbor's compose project, one per episode
  assert len(_harbor_containers_started(start)) >= 2 * 4
