"""The task source every top-level job shares (RL, SFT, the demo)."""

from __future__ import annotations

from tmax_jax.loop.config import TaskSource
from tmax_jax.tasks import loader
from tmax_jax.tasks.procedural import registry


def load_tasks(source: TaskSource) -> tuple[list, list]:
  """-> (train tasks, held-out tasks). A directory (tasks/loader.py rules) is split: the last
  `num_eval` tasks are held out."""
  if source.directory:
    tasks = loader.load_tasks(source.directory)
    n_eval = min(source.num_eval, len(tasks) - 1) if len(tasks) > 1 else 0
    return tasks[: len(tasks) - n_eval], tasks[len(tasks) - n_eval :]
  families = list(source.families) or sorted(registry.FAMILIES)

  def make(start: int, n: int) -> list:
    return [
      registry.build_task(families[i % len(families)], start + i, source.difficulty)
      for i in range(n)
    ]

  return make(source.seed, source.num_train), make(source.seed + source.num_train, source.num_eval)
