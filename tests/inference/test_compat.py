"""The JetStream 0.2.2 compatibility shim: each fix is applied and observable."""

import json
import subprocess
import sys

_PROBE = r"""
import json, logging, jax
root = logging.getLogger()
root.setLevel(logging.WARNING)
n = len(root.handlers)
had_tree_map = hasattr(jax, "tree_map")
from tmax_jax.inference import compat
compat.apply()
from jetstream.core import orchestrator
orchestrator.delete_pytree({"a": jax.numpy.ones(3)})  # crashed the generate thread before the fix
compat.apply()  # idempotent
print(json.dumps(dict(level=root.level, handlers=len(root.handlers) - n, had=had_tree_map,
                      tree_map=jax.tree_map(lambda x: x + 1, {"a": 1})["a"])))
"""


def test_tree_map_alias_and_quiet_root_logger():
  # A fresh interpreter: in this one the orchestrator may already have been imported.
  out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got == dict(level=30, handlers=0, had=False, tree_map=2)


def test_bind_host_defaults_to_loopback_and_restores():
  from tmax_jax.inference import compat

  compat.apply()
  from jetstream.core import server_lib

  before = server_lib._HOST
  with compat.bind_host():
    assert server_lib._HOST == "127.0.0.1"
  assert server_lib._HOST == before
