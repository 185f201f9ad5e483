"""SFT data from task oracles: each task's solve.sh driven through the harness in a real sandbox.

The scripted oracle (scripted.py) answers with the canonical assistant tokens of the harness format,
the commands really run in the task's sandbox, and the observations are the real outputs, so the
trajectory is exactly what a policy that solves the task would have produced and seen. Saved as
JSONL records {"task", "reward", "status", "tokens", "loss_mask"}.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import Sequence

import tqdm

from tmax_jax import json_io
from tmax_jax.agents import scripted
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import EpisodeWorker, WorkerConfig
from tmax_jax.tasks import runner as runner_lib


def oracle_records(
  tasks: Sequence,
  tokenizer,
  episode_cfg: EpisodeConfig,
  runner_cfg: runner_lib.RunnerConfig,
  parallel: int = 4,
) -> list[dict]:
  """Oracle trajectories of `tasks` (in task order), with a progress bar. A task whose oracle
  episode could not run (no solve.sh, the environment did not build) raises."""

  async def main():
    policy = scripted.ScriptedProvider(tokenizer, episode_cfg)
    worker = EpisodeWorker(
      policy, tokenizer, episode_cfg, runner_cfg, WorkerConfig(max_parallel_episodes=parallel)
    )
    bar = tqdm.tqdm(total=len(tasks), desc="oracle trajectories")

    async def one(task):
      ep = await worker(task, 0, 0)
      bar.update(1)
      return {
        "task": task.name,
        "reward": ep.reward,
        "status": ep.status,
        "tokens": [int(t) for t in ep.trajectory.tokens],
        "loss_mask": [int(m) for m in ep.trajectory.loss_mask],
      }

    try:
      return list(await asyncio.gather(*(one(t) for t in tasks)))
    finally:
      bar.close()
      await worker.aclose()

  return asyncio.run(main())


def write_jsonl(records: Sequence[dict], path: str | os.PathLike) -> pathlib.Path:
  """Atomic JSONL write (temp file + rename)."""
  return json_io.write_jsonl_atomic(records, path)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  """Records with `tokens` and `loss_mask` of equal length; a clear error names the bad line."""
  out = []
  for n, r in json_io.read_objects(path):
    if not isinstance(r, dict) or "tokens" not in r or "loss_mask" not in r:
      raise ValueError(f"{path}:{n}: expected an object with 'tokens' and 'loss_mask'")
    if len(r["tokens"]) != len(r["loss_mask"]):
      raise ValueError(
        f"{path}:{n}: {len(r['tokens'])} tokens but {len(r['loss_mask'])} loss_mask entries"
      )
    out.append(r)
  return out
