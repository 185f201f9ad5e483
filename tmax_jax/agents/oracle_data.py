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

from tmax_jax import cli, json_io
from tmax_jax.agents import scripted
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import EpisodeWorker, WorkerConfig
from tmax_jax.errors import UserError
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
    bar = cli.progress(total=len(tasks), desc="oracle trajectories")

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


def read_jsonl(path: str | os.PathLike, seq_len: int = 0) -> list[dict]:
  """Records with `tokens` (ints) and `loss_mask` (numbers), lists of equal length; a UserError
  names the bad line (a line that is not JSON included). `seq_len` > 0: every record must also fit
  one SFT row of that many tokens (check_fits), checked here when the data is loaded."""
  out = []
  try:
    for n, r in json_io.read_objects(path):
      if not isinstance(r, dict) or "tokens" not in r or "loss_mask" not in r:
        raise UserError(f"{path}:{n}: expected an object with 'tokens' and 'loss_mask'")
      tokens, mask = r["tokens"], r["loss_mask"]
      if not _numbers(tokens, int) or not _numbers(mask, (int, float)):
        raise UserError(f"{path}:{n}: 'tokens' (ints) and 'loss_mask' (numbers) must be lists")
      if len(tokens) != len(mask):
        raise UserError(f"{path}:{n}: {len(tokens)} tokens but {len(mask)} loss_mask entries")
      if seq_len:
        check_fits(len(tokens), seq_len, f"{path}:{n}")
      out.append(r)
  except json_io.MalformedJSONError as e:
    raise UserError(str(e)) from None
  return out


def check_fits(n: int, seq_len: int, where: str) -> None:
  """A trajectory of `n` tokens fits one SFT row of `seq_len` (2 .. seq_len tokens: the trainer
  packs whole trajectories, never splits one), else a UserError naming `where`: the run refuses
  the data before its first step instead of failing at the batch that holds it."""
  if not 2 <= n <= seq_len:
    raise UserError(
      f"{where}: a trajectory of {n} tokens does not fit an SFT row of seq_len={seq_len} "
      f"(2 .. {seq_len} tokens; trajectories are never split): drop it, raise seq_len, or "
      f"collect with that cap (python3 -m tmax_jax.horizon.collect --max_tokens {seq_len})"
    )


def _numbers(value, kinds) -> bool:
  return isinstance(value, list) and all(isinstance(v, kinds) for v in value)
