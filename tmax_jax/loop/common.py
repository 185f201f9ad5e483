"""Pieces every top-level job shares: tasks, the policy's params, the served engine, the runner."""

from __future__ import annotations

import logging
import pathlib

from tmax_jax.inference import launch_lib
from tmax_jax.loop.config import ModelSpec, ServingConfig, TaskSource
from tmax_jax.tasks import runner as runner_lib

log = logging.getLogger(__name__)


def load_task_dir(directory: str | pathlib.Path) -> list:
  """Every task under `directory` (TB2/Harbor dirs as they are; TB1 dirs converted), sorted."""
  from tmax_jax.tasks import format as fmt, tb1  # pylint: disable=import-outside-toplevel
  root = pathlib.Path(directory)
  if not root.is_dir():
    raise FileNotFoundError(f"task directory {root} does not exist")
  tasks = []
  for sub in sorted(p for p in root.iterdir() if p.is_dir()):
    if (sub / "task.yaml").exists():
      tasks.append(tb1.convert_tb1(sub))
    elif (sub / fmt.CONFIG_FILE).exists():
      tasks.append(fmt.load_task(sub))
  if not tasks:
    raise ValueError(f"{root}: no task directories (with task.toml or task.yaml) found")
  return tasks


def load_tasks(source: TaskSource) -> tuple[list, list]:
  """-> (train tasks, held-out tasks). A directory is split: the last `num_eval` are held out."""
  if source.directory:
    tasks = load_task_dir(source.directory)
    n_eval = min(source.num_eval, len(tasks) - 1) if len(tasks) > 1 else 0
    return tasks[:len(tasks) - n_eval], tasks[len(tasks) - n_eval:]
  from tmax_jax.tasks.procedural import registry  # pylint: disable=import-outside-toplevel
  families = list(source.families) or sorted(registry.FAMILIES)
  def make(start: int, n: int) -> list:
    return [registry.build_task(families[i % len(families)], start + i, source.difficulty)
            for i in range(n)]
  return make(source.seed, source.num_train), make(source.seed + source.num_train, source.num_eval)


def load_policy(spec: ModelSpec):
  """-> (ModelConfig, params): an HF checkpoint, or the preset at random init."""
  cfg, params_fn = launch_lib.model_from_config(spec)
  return cfg, params_fn()


def start_serving(model_cfg, params, serving: ServingConfig, stop_token_ids=()):
  """Starts the JetStream server (gRPC on 127.0.0.1) serving `params` at policy version 0."""
  from tmax_jax.inference import engine as engine_lib, server as server_lib  # pylint: disable=import-outside-toplevel
  engine_cfg = engine_lib.EngineConfig(
      max_concurrent_decodes=serving.max_concurrent_decodes, max_len=serving.max_len,
      max_prefill_length=serving.max_prefill_length, stop_token_ids=tuple(stop_token_ids))
  engine = engine_lib.TmaxEngine(model_cfg, engine_cfg, lambda: params)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=serving.port))
  log.info("rollout server on %s", server.address)
  return server


def runner_config(backend: str, memory_mb: int) -> runner_lib.RunnerConfig:
  return runner_lib.RunnerConfig(backend=backend or None, memory_mb=memory_mb)
