"""SFT data from task oracles: each task's solve.sh driven through the harness in a real sandbox.

The scripted oracle (scripted.py) answers with the canonical assistant tokens of the harness format,
the commands really run in the task's sandbox, and the observations are the real outputs, so the
trajectory is exactly what a policy that solves the task would have produced and seen. Saved as JSONL
records {"task", "reward", "status", "tokens", "loss_mask"}.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
from typing import Sequence

import tqdm

from tmax_jax.agents import scripted
from tmax_jax.agents.episode import EpisodeConfig, EpisodeResult, run_episode
from tmax_jax.tasks import runner as runner_lib


def oracle_episode(task, tokenizer, episode_cfg: EpisodeConfig,
                   runner_cfg: runner_lib.RunnerConfig) -> EpisodeResult:
  """Runs the task's oracle through the harness and the verifier; reward filled in."""
  box: dict[str, EpisodeResult] = {}

  def agent(sandbox):
    policy = scripted.oracle_policy(tokenizer, task, episode_cfg)
    box["episode"] = run_episode(sandbox, task.instruction, policy, tokenizer, episode_cfg)

  result = runner_lib.run_trial(task, agent, runner_cfg)
  if "episode" not in box:
    raise RuntimeError(f"task {task.name}: the oracle episode did not run ({result.reason})")
  episode = box["episode"]
  episode.reward, episode.reward_reason = float(result.reward), result.reason
  return episode


def oracle_records(tasks: Sequence, tokenizer, episode_cfg: EpisodeConfig,
                   runner_cfg: runner_lib.RunnerConfig, parallel: int = 4) -> list[dict]:
  """Oracle trajectories of `tasks` (in task order), with a progress bar."""
  def one(task):
    ep = oracle_episode(task, tokenizer, episode_cfg, runner_cfg)
    return {"task": task.name, "reward": ep.reward, "status": ep.status,
            "tokens": [int(t) for t in ep.trajectory.tokens],
            "loss_mask": [int(m) for m in ep.trajectory.loss_mask]}
  with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
    return list(tqdm.tqdm(pool.map(one, tasks), total=len(tasks), desc="oracle trajectories"))


def write_jsonl(records: Sequence[dict], path: str | os.PathLike) -> pathlib.Path:
  """Atomic JSONL write (temp file + rename)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
  with open(tmp, "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  os.replace(tmp, path)
  return path


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  """Records with `tokens` and `loss_mask` of equal length; a clear error names the bad line."""
  out = []
  with open(path) as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        r = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from e
      if not isinstance(r, dict) or "tokens" not in r or "loss_mask" not in r:
        raise ValueError(f"{path}:{n}: expected an object with 'tokens' and 'loss_mask'")
      if len(r["tokens"]) != len(r["loss_mask"]):
        raise ValueError(f"{path}:{n}: {len(r['tokens'])} tokens but {len(r['loss_mask'])} "
                         "loss_mask entries")
      out.append(r)
  return out
