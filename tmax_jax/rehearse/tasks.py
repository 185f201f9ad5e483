"""The rehearsal's tasks, written as TB2 task directories (the format every job reads).

RL needs reward variance inside a group: a random tiny policy solves nothing, so every episode of
a real task scores 0, the recipe's zero-std filter drops every group and no train step runs. The
coin-flip tasks are procedural `write_word` tasks (their instruction, environment and oracle) whose
verifier ignores the agent and writes reward 1 with probability 1/2, drawn from /dev/urandom in
the sandbox; the task's own verifier timeout (300 s) is below the recipe's 600 s floor, so the
max(task, 600 s) rule is what sets it.
"""

from __future__ import annotations

import dataclasses
import pathlib

from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.procedural import registry

COIN_FAMILY = "write_word"
COIN_TEST = """#!/bin/bash
# Rehearsal verifier: reward 1 with probability 1/2 whatever the agent did, so the episodes of a
# random policy on one task differ in reward (a group keeps its variance under the zero-std filter).
mkdir -p /logs/verifier
byte=$(od -An -N1 -tu1 /dev/urandom)
echo $(( byte % 2 )) > /logs/verifier/reward.txt
"""


def coin_task(task: fmt.Task) -> fmt.Task:
  """`task` with the coin-flip verifier in place of its tests, renamed coin-<name>."""
  info = dataclasses.replace(task.config.task, name=f"coin-{task.name}")
  config = dataclasses.replace(task.config, task=info)
  return dataclasses.replace(task, config=config, tests={"test.sh": COIN_TEST.encode()})


def write_tasks(directory: str | pathlib.Path, tasks: list[fmt.Task]) -> pathlib.Path:
  """Writes `tasks` as <directory>/<name>/ task directories (replacing earlier copies)."""
  root = pathlib.Path(directory)
  for task in tasks:
    fmt.write_task(task, root / task.name, overwrite=True)
  return root


def coin_tasks(n: int, seed: int = 0) -> list[fmt.Task]:
  return [coin_task(registry.build_task(COIN_FAMILY, seed + i, 0)) for i in range(n)]


def procedural_tasks(family: str, n: int, seed: int = 0) -> list[fmt.Task]:
  return [registry.build_task(family, seed + i, 0) for i in range(n)]
