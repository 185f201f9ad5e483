"""RL from the procedural library's parquet (slow): `tasks.procedural.cli --out x.parquet` is a
task source of the RL job (TaskSource.source, tasks/sources.py) like a task directory; the tiny
RL job trains 2 steps on its tasks in real sandboxes through the real server. (Eval from the
parquet: tests/tasks/test_sources.py; RL from a published pipeline set:
tests/tasks/test_pipeline_e2e.py.)"""

import pytest

from tests.conftest import require_base_rootfs
from tests.loop.rl_helpers import tiny_rl_config
from tmax_jax.loop.rl import run_rl
from tmax_jax.tasks import sources
from tmax_jax.tasks.procedural import cli
from tmax_jax.tasks.sources import TaskSource


@pytest.mark.slow
def test_rl_trains_from_the_procedural_parquet(tmp_path):
  require_base_rootfs()
  cli.generate(tmp_path / "tasks.parquet", 5, seed=0, families=["write_word"], progress=False)
  source = TaskSource(source=str(tmp_path / "tasks.parquet"), num_eval=1)
  train, held = sources.load_split(source)
  assert len(train) == 4 and len(held) == 1
  # the parquet's tasks (levels 0, 1, 2 round robin), not procedural ones built at difficulty 0
  assert [t.name for t in train] == [f"write_word-d{i % 3}-s{i}" for i in range(4)]
  run = run_rl(tiny_rl_config(tmp_path / "run", 2, tasks=source))
  assert [m["step"] for m in run.metrics] == [1, 2]
  assert all(m["loss"] > 0 and m["rollout/groups_generated"] >= 2 for m in run.metrics)
