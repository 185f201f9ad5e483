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
  assert before == server_lib._HOST


_NO_TF_PROBE = r"""
import json, sys
import tmax_jax.inference.server
TF = ("tensorflow", "tensorflow_datasets", "seqio")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in TF)
from jetstream.engine import token_utils
test_vocab = token_utils.load_vocab("test")  # JetStream's mock vocabulary: built on the stand-in
print("REAL SEQIO NOW", file=sys.stderr, flush=True)
import seqio.vocabularies  # the real package afterwards: the stand-ins did not stay
print(json.dumps(dict(loaded=loaded, decoded=test_vocab.decode([104, 105]),
                      real=hasattr(seqio.vocabularies, "SentencePieceVocabulary")
                      and seqio.vocabularies.Vocabulary is not token_utils.Vocabulary)))
"""


def test_server_imports_no_tensorflow_and_leaves_seqio_importable():
  # Fix 4 (issue 34): JetStream's token_utils imports seqio, which imports TensorFlow (4-5 s).
  out = subprocess.run(
    [sys.executable, "-c", _NO_TF_PROBE], capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stderr[-2000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got == dict(loaded=[], decoded="hi", real=True)
  ours = out.stderr.split("REAL SEQIO NOW")[0]  # before the probe imports the real seqio
  assert "cuInit" not in ours and "tensorflow" not in ours.lower(), ours[-2000:]
