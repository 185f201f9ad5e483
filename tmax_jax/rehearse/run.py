"""Running a rehearsal through the real jobs (run_rl, run_sft, evaluate) and checking what a user
would meet: train steps that ran (a loss, not skipped), a resume from the checkpoint, an HF export
that loads, an evaluation with every trial scored. A failed check raises RehearsalFailed naming
the config and what went wrong."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import time

import jax
import numpy as np

from tmax_jax import jobs, json_io
from tmax_jax.loop import run_rl, run_sft
from tmax_jax.loop.evaluate import evaluate
from tmax_jax.models import hf_io
from tmax_jax.rehearse import shrink
from tmax_jax.rehearse import tasks as tasks_lib

log = logging.getLogger(__name__)

COIN_TASKS = 5  # 4 train (2 prompts per step, async ahead) + 1 held out
# Trainer-vs-behaviour mismatch metrics every RL step of a loss reading behaviour logprobs logs.
MISMATCH_METRICS = ("mismatch_abs_logp", "mismatch_kl_k3")
REPORT = "rehearsal.json"


def use_compilation_cache(directory: str) -> None:
  """Compiled executables persist in `directory` (keyed by program, devices and jax version): a
  resumed run compiles nothing its first run compiled."""
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


class RehearsalFailed(AssertionError):
  """A rehearsal ran but a check of what a user would meet failed."""


def _check(ok: bool, name: str, what: str) -> None:
  if not ok:
    raise RehearsalFailed(f"rehearsal of {name}: {what}")


def plan(name: str, config_dict, out: str | pathlib.Path, steps: int = shrink.STEPS):
  """-> (job name, Rehearsal or None, reason skipped): the config file's job shrunk to its
  rehearsal in `out` (tasks written there); serve / demo configs and other tools' configs are
  not recipes and are skipped with the reason."""
  try:
    job, _, launcher = jobs.job_of(config_dict)
  except ValueError as err:
    return "", None, f"not a job config of the recipe ({err})"
  if job not in ("rl", "sft", "eval"):
    return job, None, f"a {job} config ({launcher}) is not a recipe run"
  out = pathlib.Path(out).resolve()
  shipped = jobs.job_config(config_dict)
  if job == "eval" and shipped.policy == "endpoint":
    why = "policy=endpoint is not a model of ours to rehearse: its model is the user's endpoint "
    why += "(tests/loop/test_evaluate_endpoint.py runs that path against our own OpenAI API)"
    return job, None, why
  if job == "rl" or (job == "eval" and shipped.policy == "server"):
    problem = shrink.engine_holds_episode(shipped.serving.engine, shipped.episode)
    _check(not problem, name, f"the shipped serving shape does not hold its episodes: {problem}")
  if job == "rl":
    tasks_dir = tasks_lib.write_tasks(out / "tasks", tasks_lib.coin_tasks(COIN_TASKS))
    r = shrink.shrink_rl(name, shipped, str(tasks_dir), str(out / "run"), steps)
  elif job == "sft":
    r = shrink.shrink_sft(name, shipped, str(out / "run"), steps)
  else:
    family = shrink.SFT_FAMILIES[0]
    procedural = tasks_lib.procedural_tasks(family, shrink.EVAL_TASKS)
    tasks_dir = tasks_lib.write_tasks(out / "tasks", procedural)
    r = shrink.shrink_eval(name, shipped, str(tasks_dir), str(out / "run"))
  shrink.check_changes(r.shipped, r.cfg, r.changes)
  return job, r, ""


def _check_steps(name: str, metrics: list[dict], expected: list[int]) -> None:
  steps = [m["step"] for m in metrics]
  _check(steps == expected, name, f"ran steps {steps}, expected {expected}")
  for m in metrics:
    _check(not m.get("skipped"), name, f"step {m['step']} was skipped: {m.get('skip_reason')}")
    _check(np.isfinite(m.get("loss", np.nan)), name, f"step {m['step']} has no finite loss: {m}")


def _check_export(name: str, export_dir: str, params, model_type: str) -> None:
  """The HF export loads as the trained model: its model_type and every param (fp32 masters)."""
  cfg, loaded = hf_io.load_pretrained(export_dir)
  _check(cfg.model_type == model_type, name, f"export model_type {cfg.model_type}")
  ours = jax.tree_util.tree_leaves_with_path(jax.device_get(params))
  theirs = jax.tree.leaves(jax.device_get(loaded))
  _check(len(ours) == len(theirs), name, "the export's param tree differs from the trained one")
  for (path, a), b in zip(ours, theirs, strict=True):
    same = np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    _check(same, name, f"export param {jax.tree_util.keystr(path)} differs from the trained one")


def rehearse_train(r: shrink.Rehearsal) -> dict:
  """RL or SFT: `steps` steps, then the same run to steps + 1 resumed from its checkpoint, then
  the HF export loaded back."""
  steps = r.cfg.steps
  run = run_rl if r.job == "rl" else run_sft
  t0 = time.perf_counter()
  first = run(r.cfg)
  t1 = time.perf_counter()
  _check_steps(r.name, first.metrics, list(range(1, steps + 1)))
  again = run(dataclasses.replace(r.cfg, steps=steps + 1))
  t2 = time.perf_counter()
  _check_steps(r.name, again.metrics, [steps + 1])  # resumed at `steps`: only the next one ran
  _check_export(r.name, again.export_dir, again.params, again.model_cfg.model_type)
  if r.job == "rl":  # the trainer-vs-behaviour mismatch, logged every step (metrics.jsonl, TB)
    logged = [m for _, m in json_io.read_objects(pathlib.Path(r.cfg.output_dir) / "metrics.jsonl")]
    missing = [m["step"] for m in logged if not all(k in m for k in MISMATCH_METRICS)]
    _check(not missing, r.name, f"steps {missing} logged no {MISMATCH_METRICS}")
  out = {"first_run_s": t1 - t0, "resume_run_s": t2 - t1, "export_dir": again.export_dir}
  out["metrics"] = first.metrics + again.metrics
  return out


def rehearse_eval(r: shrink.Rehearsal) -> dict:
  """The evaluation: every task x runs_per_task trial scored (none raised)."""
  t0 = time.perf_counter()
  results = evaluate(r.cfg)
  agg = results["aggregate"]
  expected = agg["num_tasks"] * r.cfg.runs_per_task
  _check(agg["num_tasks"] == shrink.EVAL_TASKS, r.name, f"{agg['num_tasks']} tasks evaluated")
  _check(agg["num_trials"] == expected, r.name, f"{agg['num_trials']} trials, {expected} expected")
  _check(agg["num_errors"] == 0, r.name, f"{agg['num_errors']} trials raised: {agg}")
  if r.cfg.policy == "oracle":
    _check(agg["pass@1"]["mean"] == 1.0, r.name, f"the oracle's pass@1 is {agg['pass@1']}")
  return {"eval_s": time.perf_counter() - t0, "aggregate": agg}


def rehearse(r: shrink.Rehearsal, out: str | pathlib.Path) -> dict:
  """Runs the rehearsal `r`. <out>/rehearsal.json holds the table from the start (status
  "running"), then the results ("ok") or the error ("failed")."""
  path = pathlib.Path(out) / REPORT
  report = {**r.to_json(), "status": "running"}
  json_io.write_json_atomic(path, report)
  t0 = time.perf_counter()
  try:
    result = rehearse_train(r) if r.job in ("rl", "sft") else rehearse_eval(r)
  except BaseException as err:
    failed = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
    json_io.write_json_atomic(path, {**report, **failed, "total_s": time.perf_counter() - t0})
    raise
  report = {**report, **result, "status": "ok", "total_s": time.perf_counter() - t0}
  json_io.write_json_atomic(path, report)
  return report
