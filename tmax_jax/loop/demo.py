"""The CPU demo: a tiny random model learns the harness by SFT on oracle trajectories, then DPPO RL
on procedural tasks in real sandboxes through the real JetStream server; held-out pass rates after
SFT and after RL are measured with the same sampled evaluation and written to `results.json`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import shutil
import time

import numpy as np

from tmax_jax import json_io
from tmax_jax.agents import stop_token_ids
from tmax_jax.agents.worker import EpisodeWorker
from tmax_jax.inference.client import RolloutClient
from tmax_jax.loop.config import DemoConfig, RLConfig, SFTConfig
from tmax_jax.loop.evaluate.report import mean_stderr
from tmax_jax.loop.policy import start_serving
from tmax_jax.loop.rl import run_rl
from tmax_jax.loop.sft import run_sft, sft_records
from tmax_jax.tasks import sources
from tmax_jax.tokenizers import load_tokenizer

log = logging.getLogger(__name__)


async def _sample_rewards(server_address: str, tasks, tokenizer, cfg: DemoConfig, seed: int):
  """[num_tasks, eval_samples] rewards of sampled episodes on `tasks`."""
  async with RolloutClient(server_address) as client:
    worker = EpisodeWorker.served(
      client,
      tokenizer,
      cfg.episode,
      cfg.runner,
      dataclasses.replace(cfg.worker, seed=seed + 10_000),
    )
    try:
      jobs = [worker(task, 0, k) for task in tasks for k in range(cfg.eval_samples)]
      episodes = await asyncio.gather(*jobs)
    finally:
      await worker.aclose()
  return np.asarray([e.reward for e in episodes], np.float32).reshape(len(tasks), cfg.eval_samples)


def held_out_rewards(model_cfg, params, tasks, tokenizer, cfg: DemoConfig, seed: int) -> np.ndarray:
  """Serves `params`, samples `eval_samples` episodes per held-out task, stops the server."""
  engine = cfg.serving.engine_for(stop_token_ids(cfg.episode), cfg.worker.top_logprobs)
  server = start_serving(model_cfg, params, engine, cfg.serving.port)
  try:
    return asyncio.run(_sample_rewards(server.address, tasks, tokenizer, cfg, seed))
  finally:
    server.stop()


def pass_rate(rewards: np.ndarray) -> dict:
  """pass@1 mean over tasks and its standard error (over tasks of the per-task mean)."""
  mean, stderr = mean_stderr((rewards >= 1.0).mean(axis=1).tolist())
  return {"pass_at_1": mean, "stderr": stderr, "num_tasks": len(rewards)}


def _phase_configs(cfg: DemoConfig, seed: int, out: pathlib.Path) -> tuple[SFTConfig, RLConfig]:
  model = dataclasses.replace(cfg.model, seed=seed)
  sft = SFTConfig(
    model=model,
    tasks=cfg.tasks,
    episode=cfg.episode,
    train=dataclasses.replace(cfg.sft_train, seed=seed),
    steps=cfg.sft_steps,
    seq_len=cfg.seq_len,
    runner=cfg.runner,
    output_dir=str(out / "sft"),
  )
  rl = RLConfig(
    model=model,
    tasks=cfg.tasks,
    rollout=cfg.rollout,
    episode=cfg.episode,
    worker=dataclasses.replace(cfg.worker, seed=seed),
    train=dataclasses.replace(cfg.rl_train, seed=seed),
    serving=cfg.serving,
    steps=cfg.rl_steps,
    seq_len=cfg.seq_len,
    runner=cfg.runner,
    output_dir=str(out / "rl"),
  )
  return sft, rl


def run_seed(cfg: DemoConfig, seed: int, records=None) -> dict:
  """SFT -> eval -> RL -> eval for one seed; returns its results block."""
  out = pathlib.Path(cfg.output_dir) / f"seed{seed}"
  if out.exists():  # a demo run starts from scratch: RL must not resume an older run's checkpoint
    log.warning("removing the previous demo output %s", out)
    shutil.rmtree(out)
  tokenizer = load_tokenizer(cfg.episode.family)
  _, eval_tasks = sources.load_split(cfg.tasks)
  sft_cfg, rl_cfg = _phase_configs(cfg, seed, out)
  t0 = time.perf_counter()
  sft = run_sft(sft_cfg, records=records)
  after_sft = held_out_rewards(sft.model_cfg, sft.params, eval_tasks, tokenizer, cfg, seed)
  t1 = time.perf_counter()
  rl = run_rl(rl_cfg, model_cfg=sft.model_cfg, params=sft.params)
  after_rl = held_out_rewards(rl.model_cfg, rl.params, eval_tasks, tokenizer, cfg, seed)
  t2 = time.perf_counter()
  return {
    "seed": seed,
    "after_sft": pass_rate(after_sft),
    "after_rl": pass_rate(after_rl),
    "sft_final_loss": sft.metrics[-1]["loss"],
    "rl_metrics": rl.metrics,
    "sft_seconds": t1 - t0,
    "rl_seconds": t2 - t1,
    "export_dir": rl.export_dir,
    "oracle_records": len(sft.records),
  }


def _over_seeds(values) -> dict:
  values = [float(v) for v in values]
  mean, stderr = mean_stderr(values)
  return {"mean": mean, "stderr_over_seeds": stderr, "per_seed": values}


def summarize(seeds: list[dict]) -> dict:
  """Pass@1 after SFT and after RL, and the paired gain RL - SFT: mean +- stderr over seeds."""
  sft = [s["after_sft"]["pass_at_1"] for s in seeds]
  rl = [s["after_rl"]["pass_at_1"] for s in seeds]
  return {
    "after_sft": _over_seeds(sft),
    "after_rl": _over_seeds(rl),
    "rl_gain": _over_seeds(np.subtract(rl, sft)),
  }


def run_demo(cfg: DemoConfig) -> dict:
  """Every seed of the demo; writes `<output_dir>/results.json` (atomic) and returns it."""
  out = pathlib.Path(cfg.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  start, seeds = time.perf_counter(), []
  # the oracle trajectories depend only on the tasks and the harness: make them once
  records = sft_records(
    _phase_configs(cfg, cfg.seeds[0], out)[0], load_tokenizer(cfg.episode.family)
  )
  for seed in cfg.seeds:
    result = run_seed(cfg, seed, records)
    seeds.append(result)
    print(
      f"seed {seed}: held-out pass@1 after SFT {result['after_sft']['pass_at_1']:.3f} "
      f"+- {result['after_sft']['stderr']:.3f}, after RL {result['after_rl']['pass_at_1']:.3f} "
      f"+- {result['after_rl']['stderr']:.3f}",
      flush=True,
    )
  results = {"summary": summarize(seeds), "seeds": seeds, "seconds": time.perf_counter() - start}
  json_io.write_json_atomic(out / "results.json", results, default=float)
  return results
