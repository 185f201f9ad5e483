"""Rollout worker: runs episodes of tasks in real sandboxes against the inference server.

Each episode runs in a worker thread (sandbox I/O and the verifier block), and its model calls go
to one asyncio `RolloutClient` on the caller's event loop. The task runner starts the sandbox from
the task environment, the harness loop acts, then the hidden tests are uploaded and run; the
verifier's reward is the episode's reward, except that an OOM or a crashed sandbox scores 0
(recipe.md). A server that cannot be reached raises out of the episode (its group is dropped and
counted by the scheduler); it is never turned into a reward.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import zlib

from tmax_jax.agents.episode import EpisodeConfig, EpisodeResult, run_episode
from tmax_jax.inference.client import RolloutClient
from tmax_jax.inference.sampling import SamplingParams
from tmax_jax.tasks import runner as runner_lib

ZERO_REWARD_STATUSES = ("oom", "sandbox_crash")


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
  max_parallel_episodes: int = 8
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  seed: int = 0
  request_timeout_s: float = 600.0


def episode_seed(base: int, task_name: str, group: int, sample: int) -> int:
  """A distinct, reproducible sampling seed per (run seed, task, group, sample)."""
  return zlib.crc32(f"{base}/{task_name}/{group}/{sample}".encode()) & 0x7FFFFFFF


class EpisodeWorker:
  """`await worker(task, group, sample) -> EpisodeResult` with the verifier's reward filled in."""

  def __init__(self, client: RolloutClient, tokenizer, episode_cfg: EpisodeConfig,
               runner_cfg: runner_lib.RunnerConfig, cfg: WorkerConfig = WorkerConfig()):
    self.client, self.tokenizer = client, tokenizer
    self.episode_cfg, self.runner_cfg, self.cfg = episode_cfg, runner_cfg, cfg
    self._pool = concurrent.futures.ThreadPoolExecutor(cfg.max_parallel_episodes,
                                                       thread_name_prefix="episode")
    self._closing = False
    self._stop_ids = [tokenizer.convert_tokens_to_ids("<|im_end|>"),
                      tokenizer.convert_tokens_to_ids("<|endoftext|>")]

  async def aclose(self) -> None:
    """Stops the episode threads without blocking the event loop they call back into: queued
    episodes are cancelled, running ones end at their next model call."""
    self._closing = True
    await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)

  async def __call__(self, task, group: int, sample: int) -> EpisodeResult:
    loop = asyncio.get_running_loop()
    params = SamplingParams(temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                            top_k=self.cfg.top_k,
                            seed=episode_seed(self.cfg.seed, task.name, group, sample))
    return await loop.run_in_executor(self._pool, self._run_sync, loop, task, params)

  def _run_sync(self, loop, task, params: SamplingParams) -> EpisodeResult:
    box: dict[str, EpisodeResult] = {}

    def generate(ids, max_tokens):
      if self._closing:
        raise RuntimeError("the rollout worker is shutting down")
      call = self.client.generate(ids, max_tokens, params, stop_token_ids=self._stop_ids,
                                  timeout_s=self.cfg.request_timeout_s)
      return asyncio.run_coroutine_threadsafe(call, loop).result()

    def agent(sandbox):
      box["episode"] = run_episode(sandbox, task.instruction, generate, self.tokenizer,
                                   self.episode_cfg)

    result = runner_lib.run_trial(task, agent, self.runner_cfg)
    episode = box.get("episode")
    if episode is None:  # the sandbox never started: nothing was generated, nothing to train on
      raise RuntimeError(f"task {task.name}: no episode ran ({result.reason})")
    episode.reward = 0.0 if episode.status in ZERO_REWARD_STATUSES else float(result.reward)
    episode.reward_reason = episode.status if episode.status in ZERO_REWARD_STATUSES else result.reason
    return episode
