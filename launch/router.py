"""One Rollout endpoint in front of N inference servers (tmax_jax/inference/router.py).

python3 launch/router.py --replicas=127.0.0.1:9000,127.0.0.1:9001 --port=9100
Agents and the trainer talk to 127.0.0.1:9100 as to one server: sessions stay on one replica,
requests wait in the router for KV pages, weight pushes reach every replica.
"""

from absl import flags

from tmax_jax import cli

_REPLICAS = flags.DEFINE_string("replicas", None, "HOST:PORT,HOST:PORT of the inference servers")
_PORT = flags.DEFINE_integer("port", 9100, "port the router listens on (0: a free one)")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "address it binds ('[::]': all interfaces)")
_POLL_S = flags.DEFINE_float("poll_s", 0.5, "seconds between the replicas' Status polls")
_READY_FILE = flags.DEFINE_string("ready_file", "", 'written {"address": ...} once it listens')
flags.mark_flags_as_required(["replicas"])


def main(argv):
  del argv
  import asyncio
  import json
  import signal

  from tmax_jax import json_io
  from tmax_jax.errors import UserError
  from tmax_jax.inference import router as router_lib

  try:
    replicas = router_lib.parse_replicas(_REPLICAS.value)
  except ValueError as e:
    raise UserError(f"--replicas: {e}") from e
  cli.check_port_free("--port", _HOST.value, _PORT.value)
  cfg = router_lib.RouterConfig(
    replicas=replicas, port=_PORT.value, host=_HOST.value, poll_s=_POLL_S.value
  )

  def ready(router):
    payload = json.dumps({"address": router.address, "replicas": list(replicas)})
    if _READY_FILE.value:
      json_io.write_text_atomic(_READY_FILE.value, [payload])
    print(f"ROUTING {payload}", flush=True)

  async def run():
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
      asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await router_lib.serve(cfg, stop, ready)

  asyncio.run(run())
  print("STOPPED", flush=True)


if __name__ == "__main__":
  cli.run_absl(main)
