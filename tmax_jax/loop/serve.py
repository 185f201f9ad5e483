"""The serve job (launch/serve.py): a ServeConfig -> engine -> a server running until SIGTERM."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading

from tmax_jax import cli, json_io
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


def check_ports(cfg: ServeConfig) -> None:
  """UserError when a port `cfg` serves on is taken: said in a second, before the model is built
  (the servers' own binds refuse a taken port too, but only once the model is built)."""
  cli.check_port_free("config.serving.port", cfg.host, cfg.serving.port)
  if cfg.openai.enabled:
    cli.check_port_free("config.openai.port", cfg.openai.host, cfg.openai.port)


def start_from_config(cfg: ServeConfig) -> server_lib.RolloutServer:
  """The running server of `cfg` (gRPC, and the OpenAI API when openai.port >= 0)."""
  check_ports(cfg)
  return server_lib.start_server(
    engine_from_config(cfg),
    server_lib.ServerConfig(
      port=cfg.serving.port, host=cfg.host, threads=cfg.threads, openai=cfg.openai
    ),
  )


def serve_forever(cfg: ServeConfig) -> None:
  """Starts the server, waits for SIGINT/SIGTERM, then shuts down cleanly (streams get
  UNAVAILABLE)."""
  # (JetStream logs every decode step at INFO on the root logger: the launcher's cli.run_absl
  # keeps the libraries' loggers at WARNING unless -v asks for more.)
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
