"""The entry point: load the tasks, build the policy, run the trials, write the outputs."""

from __future__ import annotations

import asyncio
import datetime
import logging
import pathlib
import shutil
import time

from tmax_jax import json_io
from tmax_jax.agents import scripted, stop_token_ids
from tmax_jax.agents.worker import EpisodeWorker
from tmax_jax.errors import ConfigError
from tmax_jax.horizon import EndpointPolicy
from tmax_jax.inference.client import RolloutClient
from tmax_jax.loop.evaluate import endpoint, plots, report
from tmax_jax.loop.evaluate.config import EvalConfig
from tmax_jax.loop.evaluate.trials import TRIALS_DIR, run_trials
from tmax_jax.loop.policy import serve_policy
from tmax_jax.tasks import sources
from tmax_jax.tokenizers import load_tokenizer

log = logging.getLogger(__name__)
# What a run writes into its output directory (plus converted/, TB1 tasks converted, and
# trials/, each trial's artifacts: trials.py).
RESULT_FILES = ("trials.jsonl", "results.json", "categories.txt", "pass_at_1.png")


def _start_server(cfg: EvalConfig):
  """Serves cfg.model (a checkpoint, or a preset at random init) in process on 127.0.0.1."""
  return serve_policy(cfg.model, cfg.serving, stop_token_ids(cfg.episode), cfg.worker.top_logprobs)


async def _records(cfg: EvalConfig, tasks, tokenizer, address: str, chat, jsonl: pathlib.Path):
  """The trial records of the configured policy (a client on this loop for policy=server; `chat`
  the endpoint's checked client for policy=endpoint)."""
  if cfg.policy == "server":
    async with RolloutClient(address) as client:
      worker = EpisodeWorker.served(
        client, tokenizer, cfg.episode, cfg.runner, cfg.worker, artifacts=True
      )
      try:
        return await run_trials(tasks, worker, cfg, jsonl)
      finally:
        await worker.aclose()
  usage = None
  policy: EndpointPolicy | scripted.ScriptedProvider
  if cfg.policy == "endpoint":
    policy = endpoint.policy(cfg, chat, tokenizer)
    usage = endpoint.trial_usage(policy, cfg.endpoint)
  else:
    policy = scripted.ScriptedProvider(tokenizer, cfg.episode, cfg.policy, cfg.terminus_wait_s)
  worker = EpisodeWorker(policy, tokenizer, cfg.episode, cfg.runner, cfg.worker, artifacts=True)
  try:
    return await run_trials(tasks, worker, cfg, jsonl, usage)
  finally:
    await worker.aclose()


def output_dir(cfg) -> pathlib.Path:
  """Where this run writes (json_io.claim_output_dir over its result files: a run never
  replaces another's results unasked; cfg.overwrite removes them first, and the trials' artifacts
  with them)."""
  out = json_io.claim_output_dir(cfg.output_dir, RESULT_FILES, cfg.overwrite)
  if cfg.overwrite:
    shutil.rmtree(out / TRIALS_DIR, ignore_errors=True)
  return out


def evaluate(cfg: EvalConfig, tokenizer=None) -> dict:
  """Runs the evaluation; returns the results dict (also written to `output_dir(cfg)`, which its
  config.output_dir names). Errored trials are reported, not scored (report.py); whether the
  results measured anything is `report.check_measured`'s verdict, left to the caller.

  policy=server with no address serves cfg.model here for the duration of the run;
  policy=endpoint checks the endpoint first (endpoint.chat_client: UserError naming the field).
  tokenizer: defaults to load_tokenizer(cfg.episode.family).
  """
  if not cfg.tasks_dir or not cfg.output_dir:
    raise ConfigError(
      f"EvalConfig.tasks_dir={cfg.tasks_dir!r} and output_dir={cfg.output_dir!r}: both must be set"
    )
  # an endpoint that cannot serve the run fails here, before any output or trial
  chat = endpoint.chat_client(cfg) if cfg.policy == "endpoint" else None
  out = output_dir(cfg)
  started, t0 = datetime.datetime.now(datetime.UTC), time.monotonic()
  tasks = sources.load_tasks(
    cfg.tasks_dir, converted_dir=out / "converted", max_tasks=cfg.max_tasks
  )
  if tokenizer is None:
    tokenizer = load_tokenizer(cfg.episode.family)
  server = _start_server(cfg) if cfg.policy == "server" and not cfg.address else None
  try:
    address = cfg.address or (server.address if server else "")
    records = asyncio.run(_records(cfg, tasks, tokenizer, address, chat, out / "trials.jsonl"))
  finally:
    if server is not None:
      server.stop()
  summary = report.aggregate(records, cfg)
  results = {
    "schema_version": report.SCHEMA_VERSION,
    "config": {**report.config_dict(cfg), "output_dir": str(out)},
    "started_at": started.isoformat(),
    "finished_at": datetime.datetime.now(datetime.UTC).isoformat(),
    "wall_time_s": round(time.monotonic() - t0, 3),
    **summary,
    "trials": records,
  }
  (out / "categories.txt").write_text(report.category_table(summary))
  if cfg.plot and summary["aggregate"]["pass@1"]["mean"] is not None:  # nothing to plot
    plots.plot_categories(
      summary,
      out / "pass_at_1.png",
      f"{cfg.policy} / {cfg.episode.harness}: pass@1 by category (k={cfg.runs_per_task})",
    )
  json_io.write_json_atomic(out / "results.json", results)
  return results
