"""The one scored-episode path: a policy plays a task in a real sandbox, then the verifier scores.

`EpisodeWorker` is used by the RL loop, the evaluation runner, the demo's held-out evaluation and
the oracle SFT data alike. Each episode runs in a worker thread (sandbox I/O and the verifier
block): the task runner starts the sandbox from the task environment, the harness (looked up once
in harnesses.py) plays the policy, then the hidden tests are uploaded and run. The verifier's reward
is the episode's reward, except that an OOM scores 0 (recipe.md); an infrastructure failure (the
runner's INFRA_FAILURES: build, sandbox start, a sandbox lost or crashed under the episode, a
verifier that wrote no readable reward) is never scored: it raises InfrastructureError with its
kind (docs/design/episodes.md "Scoring: the policy's outcome or the infrastructure's failure").

Policies are providers with `generate_fn(task, group, sample) -> generate`: `ServerPolicy` (the
inference server through one asyncio `RolloutClient` on the caller's event loop; the sampling
settings, per-episode seed and stop ids are decided here and nowhere else) and the scripted
oracle / do-nothing policies (scripted.py). A server that cannot be reached raises out of the
episode (RL drops and counts its group; eval records the error); it is never turned into a reward.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import time
import zlib
from collections.abc import Mapping
from typing import Protocol

from tmax_jax.agents import harnesses
from tmax_jax.agents.episode import EpisodeConfig, EpisodeResult, GenerateFn, stop_token_ids
from tmax_jax.inference.sampling import SamplingParams
from tmax_jax.tasks import runner as runner_lib

ZERO_REWARD_STATUSES = ("oom",)
# An episode the harness ended because its sandbox crashed: the sandbox stopped working under it
# (the runner's lost(); also for providers that cannot tell), never a score.
CRASH_STATUS = "sandbox_crash"


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
  """Episode threads and the sampling settings of served policies (recipe: T = 1, no top-p/k).

  A model request covers one turn's generation: its wait for a slot (and for weight pushes or a
  restarting server), the prefill of the conversation so far (the prefix cache usually spares
  it; a restarted server or an evicted prefix recomputes it all) and up to
  episode.turn_max_tokens generated tokens. Commands run in the sandbox between requests, so the
  command timeout is never part of one. A request that outlives its timeout fails its episode as
  a "server" failure (never scored, dropped), so the derived timeout gives the longest legal turn
  the time it takes at the floors below."""

  # Episodes running at once (threads). 0 = derived by the RL job (RLConfig.rollout_worker): the
  # server's slots, at most the episodes the batches may hold (batch x (1 + async_steps)).
  max_parallel_episodes: int = 8
  temperature: float = 1.0  # sampling temperature (must equal train.temperature in RL)
  top_p: float = 1.0  # nucleus sampling (1 = off)
  top_k: int = 0  # top-k sampling (0 = off)
  seed: int = 0  # base of the per-episode sampling seeds
  # Per model request, every retry included. 0 = derived from the episode's caps
  # (request_timeout_s()): turn_max_tokens / decode_floor_tok_s + the longest conversation
  # (max_prompt_tokens + max_response_tokens) / prefill_floor_tok_s + request_wait_s, rounded up.
  request_timeout_s: float = 0.0
  top_logprobs: int = 0  # K > 0: each generated token also carries the server's top-K logprobs
  # The floors the derived timeout assumes for one request on a full server whose devices the
  # trainer's step shares (colocated); a server slower than this fails the turn.
  decode_floor_tok_s: float = 8.0  # generated tokens per second of one request
  prefill_floor_tok_s: float = 1000.0  # conversation tokens prefilled per second of one request
  request_wait_s: float = 120.0  # a slot, weight pushes, a restarting server's retries

  def __post_init__(self):
    if self.max_parallel_episodes < 0 or self.request_timeout_s < 0 or self.request_wait_s < 0:
      raise ValueError(
        f"worker.max_parallel_episodes={self.max_parallel_episodes}, worker.request_timeout_s="
        f"{self.request_timeout_s}, worker.request_wait_s={self.request_wait_s}: expected >= 0 "
        "(0 = derived for the first two)"
      )
    if not (self.decode_floor_tok_s > 0 and self.prefill_floor_tok_s > 0):
      raise ValueError(
        f"worker.decode_floor_tok_s={self.decode_floor_tok_s}, worker.prefill_floor_tok_s="
        f"{self.prefill_floor_tok_s}: expected > 0"
      )


def request_timeout_s(cfg: WorkerConfig, episode: EpisodeConfig) -> float:
  """The timeout of each model request of an `episode`: cfg.request_timeout_s, or (0) the time the
  longest legal turn takes at the floors (WorkerConfig). The recipe's caps (16,384-token turns, a
  2,048 + 65,536-token conversation) at 8 tok/s decode, 1,000 tok/s prefill and 120 s of waiting:
  2,048 + 67.6 + 120 -> 2,236 s (the fixed 600 s before held 16,384 tokens only above 27 tok/s)."""
  if cfg.request_timeout_s:
    return cfg.request_timeout_s
  context = episode.max_prompt_tokens + episode.max_response_tokens
  decode = episode.turn_max_tokens / cfg.decode_floor_tok_s
  return float(math.ceil(decode + context / cfg.prefill_floor_tok_s + cfg.request_wait_s))


def episodes_in_flight(slots: int, batch: int, async_steps: int) -> int:
  """Episodes to run at once so that the server is full: its `slots`, at most the episodes the
  scheduler may hold (`batch` episodes a step, `async_steps` steps ahead of the trainer)."""
  return max(1, min(slots, batch * (1 + async_steps)))


def episode_seed(base: int, task_name: str, group: int, sample: int) -> int:
  """A distinct, reproducible sampling seed per (run seed, task, group, sample)."""
  return zlib.crc32(f"{base}/{task_name}/{group}/{sample}".encode()) & 0x7FFFFFFF


class Policy(Protocol):
  def generate_fn(self, task, group: int, sample: int) -> GenerateFn:
    """The generate function of one episode (called in the episode's thread)."""


class ServerPolicy:
  """A served model: requests go through `client` on the event loop this is built on."""

  def __init__(self, client, episode_cfg: EpisodeConfig, cfg: WorkerConfig = WorkerConfig()):
    self.client, self.cfg = client, cfg
    self.stop_ids = list(stop_token_ids(episode_cfg))
    self.timeout_s = request_timeout_s(cfg, episode_cfg)
    self._loop = asyncio.get_running_loop()

  def sampling(self, task, group: int, sample: int) -> SamplingParams:
    c = self.cfg
    return SamplingParams(
      temperature=c.temperature,
      top_p=c.top_p,
      top_k=c.top_k,
      seed=episode_seed(c.seed, task.name, group, sample),
    )

  def generate_fn(self, task, group: int, sample: int) -> GenerateFn:
    params = self.sampling(task, group, sample)
    # One key per episode: behind a router (inference/router.py) every turn returns to the
    # replica that holds the episode's prefix; a single server ignores it.
    session = f"{task.name}/{group}/{sample}"

    def generate(ids, max_tokens):
      call = self.client.generate(
        ids,
        max_tokens,
        params,
        stop_token_ids=self.stop_ids,
        timeout_s=self.timeout_s,
        top_logprobs=self.cfg.top_logprobs,
        session_id=session,
      )
      return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    return generate


class InfrastructureError(RuntimeError):
  """An episode the infrastructure failed (kind: one of runner.INFRA_FAILURES): never scored; the
  RL loop drops it and handles its group as rollout.on_failure says."""

  retryable = True

  def __init__(self, kind: str, message: str, sandbox: str = ""):
    super().__init__(message)
    self.kind, self.sandbox = kind, sandbox


class NoEpisodeError(InfrastructureError):
  """The sandbox never started (e.g. the environment did not build): nothing was generated."""

  def __init__(self, task_name: str, reason: str, kind: str = "build_failed"):
    super().__init__(kind, f"task {task_name}: no episode ran ({reason})")
    self.reason = reason


@dataclasses.dataclass
class Trial:
  """One scored episode. episode None: the sandbox never started (reason says why) or the policy
  could not be built; error: what raised (the runner, the verifier, the policy), else None.
  artifacts: the runner's (tasks/artifacts.py) when the worker keeps them, else empty."""

  episode: EpisodeResult | None
  reward: float = 0.0
  reason: str = ""
  error: Exception | None = None
  duration_s: float = 0.0
  failure: str = ""  # the infrastructure failure's kind (runner.INFRA_FAILURES), "" if none
  artifacts: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def result(self, task_name: str) -> EpisodeResult:
    """The scored episode; raises the trial's error, or NoEpisodeError when none ran."""
    if self.error is not None:
      raise self.error
    if self.episode is None:
      raise NoEpisodeError(task_name, self.reason, self.failure or "build_failed")
    return self.episode


def trial_episode(cfg: EpisodeConfig, runner_cfg: runner_lib.RunnerConfig, task) -> EpisodeConfig:
  """The episode limits of one trial of `task`: `cfg` with the agent's time limit as its wall
  time, runner.agent_timeout_s: a fixed budget (wall_time_s > 0: RL's, TerminalHorizon's) or the
  task's own [agent] timeout_sec (wall_time_s 0: Terminal-Bench 2.0's protocol, evaluation's
  default), x runner_cfg.timeout_multiplier."""
  limit = runner_lib.agent_timeout_s(task, runner_cfg, cfg.wall_time_s)
  return dataclasses.replace(cfg, wall_time_s=limit)


def score(episode: EpisodeResult | None, result: runner_lib.RunResult) -> Trial:
  """The verifier's reward, or 0 for an episode that ended in a zero-reward status. An
  infrastructure failure is no score: the trial carries it (`failure`; with an episode, an
  InfrastructureError that `result()` raises). The result's artifacts go with it."""
  kept = result.artifacts
  if episode is None:
    return Trial(None, float(result.reward), result.reason, failure=result.failure, artifacts=kept)
  episode.sandbox = result.sandbox
  failure = result.failure or ("sandbox_lost" if episode.status == CRASH_STATUS else "")
  if failure:
    why = f"{failure}: {result.reason if result.failure else 'the harness saw its sandbox crash'}"
    error = InfrastructureError(failure, why, result.sandbox)
    return Trial(episode, 0.0, result.reason, error=error, failure=failure, artifacts=kept)
  if episode.status in ZERO_REWARD_STATUSES:
    episode.reward, episode.reward_reason = 0.0, episode.status
  else:
    episode.reward, episode.reward_reason = float(result.reward), result.reason
  episode.verified_at = result.verified_at
  return Trial(episode, episode.reward, episode.reward_reason, artifacts=kept)


class EpisodeWorker:
  """`await worker(task, group, sample) -> EpisodeResult` with the verifier's reward filled in;
  `await worker.trial(...) -> Trial` keeps errors and missing episodes as values. artifacts:
  each Trial also carries the runner's artifacts (evaluation keeps them; RL does not ask)."""

  def __init__(
    self,
    policy: Policy,
    tokenizer,
    episode_cfg: EpisodeConfig,
    runner_cfg: runner_lib.RunnerConfig,
    cfg: WorkerConfig = WorkerConfig(),
    *,
    artifacts: bool = False,
  ):
    self.policy, self.tokenizer, self.artifacts = policy, tokenizer, artifacts
    self.harness = harnesses.get(episode_cfg.harness)
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    if eos not in stop_token_ids(episode_cfg):
      raise ValueError(
        f"the tokenizer's end of turn {tokenizer.eos_token!r} (id {eos}) is not a "
        f"stop token of EpisodeConfig.family={episode_cfg.family!r}: the "
        "tokenizer and the episode's model family disagree"
      )
    if cfg.max_parallel_episodes < 1:
      raise ValueError(
        "worker.max_parallel_episodes=0 is derived by the RL job (RLConfig.rollout_worker); "
        "set it (>= 1) for this one"
      )
    self.episode_cfg, self.runner_cfg, self.cfg = episode_cfg, runner_cfg, cfg
    self._pool = concurrent.futures.ThreadPoolExecutor(
      cfg.max_parallel_episodes, thread_name_prefix="episode"
    )
    self._closing = False

  @classmethod
  def served(
    cls,
    client,
    tokenizer,
    episode_cfg: EpisodeConfig,
    runner_cfg: runner_lib.RunnerConfig,
    cfg: WorkerConfig = WorkerConfig(),
    **kw,
  ):
    """A worker whose policy is the model behind `client` (call on the client's event loop)."""
    policy = ServerPolicy(client, episode_cfg, cfg)
    return cls(policy, tokenizer, episode_cfg, runner_cfg, cfg, **kw)

  async def aclose(self) -> None:
    """Stops the episode threads without blocking the event loop they call back into: queued
    episodes are cancelled, running ones end at their next model call."""
    self._closing = True
    await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)

  async def trial(self, task, group: int, sample: int) -> Trial:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(self._pool, self._run_sync, task, group, sample)

  async def __call__(self, task, group: int, sample: int) -> EpisodeResult:
    return (await self.trial(task, group, sample)).result(task.name)

  def _run_sync(self, task, group: int, sample: int) -> Trial:
    start, box = time.monotonic(), {}
    try:
      policy = self.policy.generate_fn(task, group, sample)
      episode_cfg = trial_episode(self.episode_cfg, self.runner_cfg, task)

      def generate(ids, max_tokens):
        if self._closing:
          raise RuntimeError("the rollout worker is shutting down")
        return policy(ids, max_tokens)

      def agent(sandbox):
        box["episode"] = self.harness.run(
          sandbox, task.instruction, generate, self.tokenizer, episode_cfg
        )

      result = runner_lib.run_trial(task, agent, self.runner_cfg, artifacts=self.artifacts)
      trial = score(box.get("episode"), result)
    except Exception as err:  # kept as a value; see Trial (a RewardError keeps the artifacts)
      trial = Trial(box.get("episode"), error=err, artifacts=getattr(err, "artifacts", {}))
    trial.duration_s = time.monotonic() - start
    return trial
