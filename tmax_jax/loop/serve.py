"""The serve job (launch/serve.py): a ServeConfig -> engine -> a server running until SIGTERM."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading

from tmax_jax import json_io
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.inference import server as server_lib
from tmax_jax.loop.config import ServeConfig
from tmax_jax.loop.policy import default_stop_token_ids, served_config, served_model

log = logging.getLogger(__name__)


def engine_from_config(cfg: ServeConfig) -> engine_lib.TmaxEngine:
  """The engine on this host's first serving.replicas x serving.tensor devices; the stop ids
  default to the model family's, Decode calls sample at `temperature` unless they say otherwise."""
  mesh = engine_lib.serving_mesh(cfg.serving.replicas, cfg.serving.tensor)
  model_cfg, params_fn = served_model(cfg.model, mesh)
  engine_cfg = cfg.serving.engine_for(
    cfg.serving.engine.stop_token_ids or default_stop_token_ids(model_cfg)
  )
  engine_cfg = dataclasses.replace(
    engine_cfg, default_sampling=sampling.SamplingParams(temperature=cfg.temperature)
  )
  served = served_config(model_cfg, cfg.serving)
  return engine_lib.TmaxEngine(served, engine_cfg, params_fn, mesh=mesh)


def start_from_config(cfg: ServeConfig) -> server_lib.RolloutServer:
  """The running server of `cfg` (gRPC, and the OpenAI API when openai.port >= 0)."""
  return server_lib.start_server(
    engine_from_config(cfg),
    server_lib.ServerConfig(
      port=cfg.serving.port, host=cfg.host, threads=cfg.threads, openai=cfg.openai
    ),
  )


def serve_forever(cfg: ServeConfig) -> None:
  """Starts the server, waits for SIGINT/SIGTERM, then shuts down cleanly (streams get
  UNAVAILABLE)."""
  # JetStream logs every decode step at INFO on the root logger; keep ours at INFO.
  logging.getLogger().setLevel(logging.WARNING)
  logging.getLogger("tmax_jax").setLevel(logging.INFO)
  server = start_from_config(cfg)
  stop = threading.Event()
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda *_: stop.set())
  payload = {"address": server.address, "pid": os.getpid()}
  if server.openai is not None:
    payload["openai_base_url"] = server.openai.base_url
  if cfg.ready_file:
    json_io.write_text_atomic(cfg.ready_file, [json.dumps(payload)])
  print(f"SERVING {json.dumps(payload)}", flush=True)
  stop.wait()
  log.info("shutting down")
  server.stop()
  print("STOPPED", flush=True)
