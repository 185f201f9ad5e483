"""Pieces every top-level job shares: tasks, the policy's params, the served engine, the runner."""

from __future__ import annotations

import logging

from tmax_jax.inference import launch_lib
from tmax_jax.loop.config import ModelSpec, ServingConfig, TaskSource, check_family
from tmax_jax.tasks import runner as runner_lib
from tmax_jax.tasks import sources

log = logging.getLogger(__name__)


def load_tasks(source: TaskSource) -> tuple[list, list]:
  """-> (train tasks, held-out tasks) through tasks/sources.py: a task directory, a published
  pipeline set or a task parquet (the last `num_eval` tasks are held out), else procedural
  families."""
  return sources.load_split(
    source.source or source.directory,
    families=source.families,
    difficulty=source.difficulty,
    num_train=source.num_train,
    num_eval=source.num_eval,
    seed=source.seed,
  )


def load_policy(spec: ModelSpec, family: str, where: str = "", mesh=None, **cfg_overrides):
  """-> (ModelConfig, params): an HF checkpoint, or the preset at random init; its model_type
  must be of the episodes' `family` (config.check_family). With `mesh`, loaded straight into the
  params' shardings on it (each device reads only its block; no full host copy per device);
  `cfg_overrides` replace ModelConfig fields (e.g. the serving mesh's logical_axis_rules)."""
  cfg, params_fn = launch_lib.model_from_config(spec, mesh, **cfg_overrides)
  check_family(cfg.model_type, family, where)
  return cfg, params_fn()


def serve_policy(
  spec: ModelSpec, family: str, serving: ServingConfig, stop_token_ids=(), max_topk: int = 0
):
  """Loads `spec` straight into the serving shardings of this process's serving devices (the
  first serving.replicas x serving.tensor) and starts the server there (eval)."""
  from tmax_jax.loop import placement  # pylint: disable=import-outside-toplevel

  mesh = placement.serving_only(serving)
  model_cfg, params_fn = launch_lib.served_model(spec, mesh)
  check_family(model_cfg.model_type, family)
  return start_serving(
    served_config(model_cfg, serving), params_fn(), serving, stop_token_ids, max_topk, mesh=mesh
  )


def served_config(model_cfg, serving: ServingConfig):
  """The policy's config as the server holds it (its own param dtype when set)."""
  if not serving.param_dtype:
    return model_cfg
  return model_cfg.with_dtypes(param_dtype=serving.param_dtype)


def engine_config(serving: ServingConfig, stop_token_ids=(), max_topk: int = 0):
  """The EngineConfig of an in-process server (also what tmax_jax.plan sizes its pool with)."""
  from tmax_jax.inference import engine as engine_lib  # pylint: disable=import-outside-toplevel

  return engine_lib.EngineConfig(
    max_concurrent_decodes=serving.max_concurrent_decodes,
    max_len=serving.max_len,
    max_prefill_length=serving.max_prefill_length,
    page_size=serving.page_size,
    num_pages=serving.num_pages,
    prefix_cache=serving.prefix_cache,
    batch_invariant=serving.batch_invariant,
    decode_steps=serving.decode_steps,
    stop_token_ids=tuple(stop_token_ids),
    max_topk=max_topk,
  )


def start_serving(
  model_cfg, params, serving: ServingConfig, stop_token_ids=(), max_topk: int = 0, mesh=None
):
  """Starts the JetStream server (gRPC on 127.0.0.1) serving `params` at policy version 0, on
  `mesh` (a ("replica", "tensor") serving mesh; default: the first device); `max_topk`: the most
  top-K logprobs its requests may ask for (WorkerConfig.top_logprobs)."""
  # pylint: disable-next=import-outside-toplevel
  from tmax_jax.inference import engine as engine_lib
  from tmax_jax.inference import server as server_lib

  engine_cfg = engine_config(serving, stop_token_ids, max_topk)
  engine = engine_lib.TmaxEngine(model_cfg, engine_cfg, lambda: params, mesh=mesh)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=serving.port))
  log.info("rollout server on %s", server.address)
  return server


def runner_config(backend: str, memory_mb: int) -> runner_lib.RunnerConfig:
  return runner_lib.RunnerConfig(backend=backend or None, memory_mb=memory_mb)
