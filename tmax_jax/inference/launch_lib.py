"""Config (ml_collections) -> engine -> running server; the body of launch/serve.py.

Config layout (see configs/serve_tiny.py):
  model.checkpoint   HF checkpoint dir ("" = random init of `model.preset` + `model.overrides`)
  model.preset       e.g. "qwen3-1.7b" / "qwen3.5-9b" (used when checkpoint is "")
  model.overrides    ModelConfig field overrides (tiny shapes at random init; kernels, remat, rules
                     on a checkpoint too)
  model.{param,compute,head}_dtype, model.seed
  engine.*           EngineConfig fields; engine.temperature = default for JetStream Decode calls;
                     engine.replicas x engine.tensor = the serving mesh
  server.*           ServerConfig fields
  openai.*           OpenAIConfig fields (inference/openai_api.py; port -1 = no HTTP API)
  ready_file         "" or a path: JSON {"address", "pid"} written atomically once serving
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
from typing import Any

import jax
from jax.sharding import Mesh

from tmax_jax import json_io
from tmax_jax.inference import decode, openai_api, sampling
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import server as server_lib
from tmax_jax.models import registry
from tmax_jax.models.config import (
  DEFAULT_LOGICAL_AXIS_RULES,
  DtypePolicy,
  ModelConfig,
  UnsupportedConfigError,
  from_hf_config,
)

log = logging.getLogger(__name__)


def checkpoint_overrides(mc) -> dict:
  """The `mc.overrides` that apply on top of `mc.checkpoint`: the runtime choices (remat, attention
  kernel and chunks, axis rules, scan), not the fields the checkpoint's config.json defines (its
  architecture wins; a tiny-shape override of a preset config is dropped with a log line)."""
  from tmax_jax.models import registry  # pylint: disable=import-outside-toplevel
  from tmax_jax.models.config import load_hf_dict  # pylint: disable=import-outside-toplevel

  hf = load_hf_dict(mc.checkpoint)
  defined = set(registry.family_for(hf.get("model_type")).parse_hf(hf))
  dropped = sorted(set(mc.overrides) & defined)
  if dropped:
    log.info(
      "model.overrides %s: defined by the checkpoint %s, not overridden", dropped, mc.checkpoint
    )
  return {k: v for k, v in dict(mc.overrides).items() if k not in defined}


def model_config(mc, **cfg_overrides) -> ModelConfig:
  """The ModelConfig a ModelSpec names (its checkpoint's config.json + the runtime overrides, or
  its preset + overrides), without loading params."""
  dtypes = DtypePolicy(
    param_dtype=mc.param_dtype, compute_dtype=mc.compute_dtype, head_dtype=mc.head_dtype
  )
  if mc.checkpoint:
    overrides = {**checkpoint_overrides(mc), **cfg_overrides}
    return from_hf_config(mc.checkpoint, dtypes=dtypes, **overrides)
  if not mc.preset:
    raise ValueError("config.model: set `checkpoint` (an HF directory) or `preset`")
  return registry.preset(mc.preset, dtypes=dtypes, **{**dict(mc.overrides), **cfg_overrides})


def model_from_config(mc, mesh=None, **cfg_overrides) -> tuple[ModelConfig, Any]:
  """-> (ModelConfig, params_fn). With `mesh`, params load (or initialise) straight into their
  shardings on it: each device reads only its own block of the checkpoint. `cfg_overrides`
  replace ModelConfig fields (e.g. the serving mesh's logical_axis_rules)."""
  cfg = model_config(mc, **cfg_overrides)
  shardings = None
  if mesh is not None:
    from tmax_jax import sharding  # pylint: disable=import-outside-toplevel

    shardings = sharding.param_shardings(cfg, mesh)
  if mc.checkpoint:
    from tmax_jax.models import hf_io  # pylint: disable=import-outside-toplevel

    params = hf_io.load_params(mc.checkpoint, cfg, shardings)
    return cfg, lambda: params
  return cfg, lambda: registry.init_params(cfg, jax.random.key(mc.seed), shardings)


def default_stop_token_ids(cfg: ModelConfig) -> tuple[int, ...]:
  """The model family's end-of-turn and end-of-text ids; () for a family without a tokenizer."""
  try:
    return registry.tokenizer_for(cfg.model_type).stop_token_ids()
  except UnsupportedConfigError:
    return ()


def served_model(mc, mesh: Mesh) -> tuple[ModelConfig, Any]:
  """-> (ModelConfig, params_fn) loading `mc` straight into the serving shardings on `mesh` (a
  ("replica", "tensor") serving mesh: only its tensor axis splits; each device reads its block)."""
  rules = decode.serving_rules(DEFAULT_LOGICAL_AXIS_RULES)
  cfg, params_fn = model_from_config(mc, mesh, logical_axis_rules=rules)
  return cfg.replace(logical_axis_rules=DEFAULT_LOGICAL_AXIS_RULES), params_fn


ENGINE_EXTRAS = ("temperature", "replicas", "tensor")  # config.engine keys that are not fields


def engine_from_config(config) -> engine_lib.TmaxEngine:
  """config.engine: EngineConfig fields (stop_token_ids default: the model family's), plus
  `temperature` (default sampling of JetStream Decode calls) and the serving mesh
  `replicas` x `tensor` (first devices of this host)."""
  ec = dict(config.engine)
  extras = {k: ec.pop(k) for k in ENGINE_EXTRAS if k in ec}
  unknown = sorted(set(ec) - {f.name for f in dataclasses.fields(engine_lib.EngineConfig)})
  if unknown:
    raise ValueError(f"config.engine: unknown fields {unknown}")
  mesh = engine_lib.serving_mesh(extras.get("replicas", 1), extras.get("tensor", 1))
  cfg, params_fn = served_model(config.model, mesh)
  ec["stop_token_ids"] = (
    tuple(ec["stop_token_ids"]) if "stop_token_ids" in ec else (default_stop_token_ids(cfg))
  )
  if "temperature" in extras:
    ec["default_sampling"] = sampling.SamplingParams(temperature=extras["temperature"])
  return engine_lib.TmaxEngine(cfg, engine_lib.EngineConfig(**ec), params_fn, mesh=mesh)


def _write_ready(path: str, payload: dict) -> None:
  json_io.write_text_atomic(path, [json.dumps(payload)])


def serve_forever(config) -> None:
  """Starts the server, waits for SIGINT/SIGTERM, then shuts down cleanly (streams get
  UNAVAILABLE)."""
  # JetStream logs every decode step at INFO on the root logger; keep ours at INFO.
  logging.getLogger().setLevel(logging.WARNING)
  logging.getLogger("tmax_jax").setLevel(logging.INFO)
  engine = engine_from_config(config)
  sc = config.server
  http = openai_api.OpenAIConfig(**config.openai if "openai" in config else {})
  server = server_lib.start_server(
    engine, server_lib.ServerConfig(port=sc.port, host=sc.host, threads=sc.threads, openai=http)
  )
  stop = threading.Event()
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda *_: stop.set())
  payload = {"address": server.address, "pid": os.getpid()}
  if server.openai is not None:
    payload["openai_base_url"] = server.openai.base_url
  if config.ready_file:
    _write_ready(config.ready_file, payload)
  print(f"SERVING {json.dumps(payload)}", flush=True)
  stop.wait()
  log.info("shutting down")
  server.stop()
  print("STOPPED", flush=True)
