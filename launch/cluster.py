"""Inference replicas on a running Ray cluster's `inference` nodes, one router in front; with
--rl_config, the RL job's trainer processes on its `trainer` nodes too.

ray start --head --resources='{"trainer": 1}'                       # on each trainer node
ray start --address=HEAD:6379 --resources='{"inference": 1}'        # on each inference node
ray start --address=HEAD:6379 --resources='{"sandbox": 1}'          # on each sandbox host
python3 launch/cluster.py --address=auto --serve_config=configs/serve_random.py --replicas=2
python3 launch/cluster.py --address=auto --rl_config=configs/tmax_qwen3_5_9b_2x6_h100.py
(with --gpus_per_replica=8 --trainer_gpus=8 on 8-GPU nodes, --rl_config.a.b=V as overrides)
Each replica is launch/serve.py on the node Ray places it on (the checkout at the same path on
every node); the router listens on this node. A replica Ray reports lost is restarted and the
router follows it. Ctrl-C or SIGTERM stops the router and every replica. An RL job
(serving.placement 'nodes') gets one replica per inference node (serving.nodes; each serves its
policy: configs/serve_policy.py), then its topology.processes trainer processes
(launch/train_rl.py, jax.distributed among them, serving.address = the router); the launcher
exits with the job, stopping the replicas. With runner.sandbox_hosts='ray' the episodes' sandboxes
run on the nodes offering `sandbox`, one sandbox host each (tmax_jax/cluster/sandbox_hosts.py).
"""

import json

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_ADDRESS = flags.DEFINE_string("address", "auto", "the Ray cluster: 'auto' or its head's HOST:PORT")
_SERVE_CONFIG = flags.DEFINE_string(
  "serve_config", "configs/serve_random.py", "each replica's serving config (configs/serve_*.py)"
)
_SERVE_OVERRIDE = flags.DEFINE_multi_string(
  "serve_override", [], "FIELD=VALUE of the serving config, for every replica (repeatable)"
)
_REPLICAS = flags.DEFINE_integer("replicas", 1, "inference replicas (one 'inference' each)")
_GPUS = flags.DEFINE_float("gpus_per_replica", 0.0, "GPUs Ray gives each replica (0: CPU)")
_OPENAI = flags.DEFINE_bool("openai", True, "replicas serve the OpenAI API too (a free port)")
_ROUTER_PORT = flags.DEFINE_integer("router_port", 9100, "port the router listens on (0: free)")
_ROUTER_HOST = flags.DEFINE_string("router_host", "", "address it binds ('': this node's)")
_LOG_DIR = flags.DEFINE_string("server_log_dir", "/tmp/tmax_cluster", "servers' logs, on each node")
_RL_CONFIG = config_flags.DEFINE_config_file(
  "rl_config", None, "an RL job (serving.placement='nodes') to run on the cluster", lock_config=True
)
_TRAINER_GPUS = flags.DEFINE_float("trainer_gpus", 0.0, "GPUs Ray gives each trainer process")
_TRAINER_RESTARTS = flags.DEFINE_integer(
  "trainer_restarts", 3, "whole-gang restarts of the trainer after a lost or failed process"
)
_TRAINER_ENV = flags.DEFINE_multi_string(
  "trainer_env", [], "KEY=VALUE added to the trainer processes' environment (repeatable)"
)
# RL overrides the inference nodes' server cannot follow: it derives them from the config file
_NOT_FORWARDED = ("worker.top_logprobs", "deterministic", "episode.family")
_READY_FILE = flags.DEFINE_string(
  "ready_file", "", 'written {"router": ..., "replicas": [...]} once the router listens'
)


def _rl_overrides() -> tuple[list[str], list[str]]:
  """The --rl_config.a.b overrides given (as ml_collections parsed them, `=V` or ` V`) -> (the
  trainer's `--config.a.b=V`, the inference nodes' server's: those of its own fields, model.* and
  serving.engine.* / serving.param_dtype)."""
  from tmax_jax.errors import UserError

  given = config_flags.get_override_values(flags.FLAGS["rl_config"])
  for key in given:
    if key in _NOT_FORWARDED:
      raise UserError(
        f"--rl_config.{key}: the inference nodes' servers read it from the config file; "
        "set it there"
      )
  args = {k: f"--config.{k}={v if isinstance(v, str) else repr(v)}" for k, v in given.items()}
  serve = [
    a for k, a in args.items() if k.startswith(("model.", "serving.engine.", "serving.param_dtype"))
  ]
  return list(args.values()), serve


def _run_rl(fleet_lib, spec_of) -> int:
  """Places the RL job's replicas (one per inference node) and runs its trainer gang to its end."""
  import dataclasses
  import pathlib

  from tmax_jax import jobs
  from tmax_jax.cluster import sandbox_hosts
  from tmax_jax.cluster import trainer as trainer_lib
  from tmax_jax.errors import UserError

  rl = jobs.job_config(_RL_CONFIG.value, "rl", "rl_config")
  if rl.serving.placement != "nodes":
    raise UserError(
      f"--rl_config: serving.placement={rl.serving.placement!r}; the cluster runs jobs that serve "
      "on inference nodes ('nodes', with serving.nodes); run the others with launch/train_rl.py"
    )
  trainer_flags, serve_flags = _rl_overrides()
  path = str(pathlib.Path(flags.FLAGS["rl_config"].config_filename).resolve())
  cfg = dataclasses.replace(
    spec_of(f"configs/serve_policy.py:{path}", serve_flags), replicas=rl.serving.nodes
  )
  with sandbox_hosts.hosts_for(rl.runner), fleet_lib.place_replicas(cfg) as fleet:
    print(f"ROUTING {fleet.router_address}", flush=True)
    env = tuple(tuple(e.split("=", 1)) for e in _TRAINER_ENV.value)
    spec = trainer_lib.TrainerSpec(
      rl_config=path,
      overrides=tuple(trainer_flags),
      processes=rl.topology.processes,
      gpus=_TRAINER_GPUS.value,
      restarts=_TRAINER_RESTARTS.value,
      log_dir=_LOG_DIR.value,
      env=env,
    )
    trainer_lib.run_trainers(spec, fleet.router_address)
    print(f"REPLICAS {json.dumps(_replica_counters(fleet.router_address))}", flush=True)
  print("RL DONE", flush=True)
  return 0


def _replica_counters(router: str) -> list[dict]:
  """Each replica's version and prompt tokens (prefilled, served from its prefix cache), as the
  router last polled them."""
  import asyncio

  from tmax_jax.inference.client import RolloutClient

  async def status():
    async with RolloutClient(router) as c:
      return await c.status()

  fields = ("address", "live", "version", "prefill_tokens", "cached_prompt_tokens")
  return [{f: getattr(r, f) for f in fields} for r in asyncio.run(status()).replica_status]


def main(argv):
  del argv
  import dataclasses
  import signal

  from tmax_jax import json_io
  from tmax_jax.cluster import fleet as fleet_lib  # UserError when ray is not installed
  from tmax_jax.cluster import roles
  from tmax_jax.cluster.replica import ServerSpec
  from tmax_jax.errors import UserError

  bad = [o for o in _SERVE_OVERRIDE.value + _TRAINER_ENV.value if "=" not in o]
  if bad:
    raise UserError(f"--serve_override / --trainer_env {bad[0]!r}: expected FIELD=VALUE")
  roles.connect(_ADDRESS.value)
  # SIGTERM stops as Ctrl-C does (set after ray.init, which installs its own handler: exit 15)
  signal.signal(signal.SIGTERM, signal.default_int_handler)

  def fleet_config(serve_config: str, overrides) -> fleet_lib.FleetConfig:
    return fleet_lib.FleetConfig(
      server=ServerSpec(
        serve_config=serve_config,
        overrides=tuple(overrides),
        openai=_OPENAI.value,
        log_dir=_LOG_DIR.value,
      ),
      replicas=_REPLICAS.value,
      gpus=_GPUS.value,
      router_host=_ROUTER_HOST.value,
      router_port=_ROUTER_PORT.value,
    )

  if _RL_CONFIG.value is not None:
    try:
      return _run_rl(fleet_lib, fleet_config)
    except KeyboardInterrupt:
      print("STOPPED", flush=True)
      return 130
  cfg = fleet_config(_SERVE_CONFIG.value, (f"--config.{o}" for o in _SERVE_OVERRIDE.value))
  fleet = None
  try:
    fleet = fleet_lib.place_replicas(cfg)
    payload = json.dumps(
      {
        "router": fleet.router_address,
        "replicas": [dataclasses.asdict(r) for r in fleet.replicas()],
      }
    )
    if _READY_FILE.value:
      json_io.write_text_atomic(_READY_FILE.value, [payload])
    print(f"ROUTING {payload}", flush=True)
    signal.pause()
  except KeyboardInterrupt:
    pass
  finally:
    if fleet is not None:
      fleet.stop()
  print("STOPPED", flush=True)


if __name__ == "__main__":
  cli.run_absl(main)
