"""Inference replicas on a running Ray cluster's `inference` nodes, one router in front.

ray start --head --resources='{"trainer": 1}'                       # on the trainer node
ray start --address=HEAD:6379 --resources='{"inference": 1}'        # on each inference node
python3 launch/cluster.py --address=auto --serve_config=configs/serve_random.py --replicas=2
Each replica is launch/serve.py on the node Ray places it on (the checkout at the same path on
every node); the router listens on this node. A replica Ray reports lost is restarted and the
router follows it. Ctrl-C or SIGTERM stops the router and every replica.
"""

from absl import flags

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
_READY_FILE = flags.DEFINE_string(
  "ready_file", "", 'written {"router": ..., "replicas": [...]} once the router listens'
)


def main(argv):
  del argv
  import dataclasses
  import json
  import signal

  from tmax_jax import json_io
  from tmax_jax.cluster import fleet as fleet_lib  # UserError when ray is not installed
  from tmax_jax.cluster import roles
  from tmax_jax.cluster.replica import ServerSpec
  from tmax_jax.errors import UserError

  bad = [o for o in _SERVE_OVERRIDE.value if "=" not in o]
  if bad:
    raise UserError(f"--serve_override={bad[0]!r}: expected FIELD=VALUE")
  roles.connect(_ADDRESS.value)
  # SIGTERM stops as Ctrl-C does (set after ray.init, which installs its own handler: exit 15)
  signal.signal(signal.SIGTERM, signal.default_int_handler)
  cfg = fleet_lib.FleetConfig(
    server=ServerSpec(
      serve_config=_SERVE_CONFIG.value,
      overrides=tuple(f"--config.{o}" for o in _SERVE_OVERRIDE.value),
      openai=_OPENAI.value,
      log_dir=_LOG_DIR.value,
    ),
    replicas=_REPLICAS.value,
    gpus=_GPUS.value,
    router_host=_ROUTER_HOST.value,
    router_port=_ROUTER_PORT.value,
  )
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
