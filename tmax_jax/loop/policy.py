"""The policy's params for every job: an HF checkpoint, or random weights (a preset, or a
checkpoint's config.json with `random`), loaded straight into a mesh's shardings; and the
in-process server that serves them (eval, the demo, the RL loop's InProcessServer)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh

from tmax_jax.errors import ConfigError
from tmax_jax.inference import decode
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import server as server_lib
from tmax_jax.loop import placement
from tmax_jax.loop.config import ModelSpec, ServingConfig, with_family
from tmax_jax.models import (
  DEFAULT_LOGICAL_AXIS_RULES,
  DtypePolicy,
  ModelConfig,
  UnsupportedConfigError,
  dummy_weights,
  hf_io,
  load_hf_dict,
  registry,
)

log = logging.getLogger(__name__)


def checkpoint_overrides(spec: ModelSpec) -> dict:
  """The `spec.overrides` that apply on top of `spec.checkpoint`: the runtime choices (remat,
  attention kernel and chunks, axis rules, scan), not the fields the checkpoint's config.json
  defines (its architecture wins; a tiny-shape override of a preset config is dropped, logged)."""
  hf = load_hf_dict(spec.checkpoint)
  defined = set(registry.family_for(hf.get("model_type")).parse_hf(hf))
  dropped = sorted(set(spec.overrides) & defined)
  if dropped:
    log.info(
      "model.overrides %s: defined by the checkpoint %s, not overridden", dropped, spec.checkpoint
    )
  return {k: v for k, v in dict(spec.overrides).items() if k not in defined}


def model_config(spec: ModelSpec, **cfg_overrides) -> ModelConfig:
  """The ModelConfig `spec` names (no weights read): the checkpoint's config.json or the preset."""
  dtypes = DtypePolicy(
    param_dtype=spec.param_dtype, compute_dtype=spec.compute_dtype, head_dtype=spec.head_dtype
  )
  if spec.checkpoint:
    overrides = {**checkpoint_overrides(spec), **cfg_overrides}
    return registry.from_hf_config(spec.checkpoint, dtypes=dtypes, **overrides)
  if not spec.preset:
    raise ConfigError("model: set `checkpoint` (an HF directory) or `preset`")
  return registry.preset(spec.preset, dtypes=dtypes, **{**dict(spec.overrides), **cfg_overrides})


def model_from_spec(
  spec: ModelSpec, mesh: Mesh | None = None, **cfg_overrides
) -> tuple[ModelConfig, Callable[[], Any]]:
  """-> (ModelConfig, params_fn). With `mesh`, params load (or initialise) straight into their
  shardings on it: each device reads only its own block of the checkpoint. `cfg_overrides`
  replace ModelConfig fields (e.g. the serving mesh's logical_axis_rules)."""
  cfg = model_config(spec, **cfg_overrides)
  shardings = None if mesh is None else registry.param_shardings(cfg, mesh)
  if not spec.random_weights:
    if spec.random_reply_tokens:
      log.info(
        "model.random_reply_tokens=%d: not applied, the weights are %s's",
        spec.random_reply_tokens,
        spec.checkpoint,
      )
    params = hf_io.load_params(spec.checkpoint, cfg, shardings)
    return cfg, lambda: params
  return cfg, lambda: random_params(spec, cfg, shardings)


def random_params(spec: ModelSpec, cfg: ModelConfig, shardings: Any = None) -> Any:
  """The random init of `cfg` at spec.seed (in `shardings` when given); with
  spec.random_reply_tokens, reshaped so that replies end after about that many tokens."""
  params = registry.init_params(cfg, jax.random.key(spec.seed), shardings)
  if not spec.random_reply_tokens:
    return params
  return dummy_weights.end_replies(params, cfg, spec.random_reply_tokens, shardings)


def load_policy(spec: ModelSpec, episode, where: str = "", mesh: Mesh | None = None):
  """-> (ModelConfig, params, episode): `spec` loaded (into `mesh`'s shardings when given), and
  `episode` with its family derived from (or checked against) the loaded model_type."""
  cfg, params_fn = model_from_spec(spec, mesh)
  return cfg, params_fn(), with_family(episode, cfg.model_type, where)


def default_stop_token_ids(cfg: ModelConfig) -> tuple[int, ...]:
  """The model family's end-of-turn and end-of-text ids; () for a family without a tokenizer."""
  try:
    return registry.tokenizer_for(cfg.model_type).stop_token_ids()
  except UnsupportedConfigError:
    return ()


def served_model(spec: ModelSpec, mesh: Mesh) -> tuple[ModelConfig, Callable[[], Any]]:
  """-> (ModelConfig, params_fn) loading `spec` straight into the serving shardings on `mesh` (a
  ("replica", "tensor") serving mesh: only its tensor axis splits; each device reads its block)."""
  rules = decode.serving_rules(DEFAULT_LOGICAL_AXIS_RULES)
  cfg, params_fn = model_from_spec(spec, mesh, logical_axis_rules=rules)
  return cfg.replace(logical_axis_rules=DEFAULT_LOGICAL_AXIS_RULES), params_fn


def served_config(model_cfg: ModelConfig, serving: ServingConfig) -> ModelConfig:
  """The policy's config as the server holds it (its own param dtype when set)."""
  if not serving.param_dtype:
    return model_cfg
  return model_cfg.with_dtypes(param_dtype=serving.param_dtype)


def start_serving(
  model_cfg: ModelConfig,
  params,
  engine_cfg: engine_lib.EngineConfig,
  port: int = 0,
  mesh: Mesh | None = None,
):
  """Starts the JetStream server (gRPC on 127.0.0.1) serving `params` at policy version 0, on
  `mesh` (a ("replica", "tensor") serving mesh; default: the first device)."""
  engine = engine_lib.TmaxEngine(model_cfg, engine_cfg, lambda: params, mesh=mesh)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=port))
  log.info("rollout server on %s", server.address)
  return server


def serve_policy(spec: ModelSpec, serving: ServingConfig, stop_token_ids=(), max_topk: int = 0):
  """Loads `spec` straight into the serving shardings of this process's serving devices (the
  first serving.replicas x serving.tensor) and starts the server there (eval)."""
  mesh = placement.serving_only(serving)
  model_cfg, params_fn = served_model(spec, mesh)
  engine_cfg = serving.engine_for(stop_token_ids, max_topk)
  return start_serving(
    served_config(model_cfg, serving), params_fn(), engine_cfg, serving.port, mesh
  )
