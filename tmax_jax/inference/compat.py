"""Compatibility shim for google-jetstream 0.2.2 on current JAX (the only monkeypatching we do).

JetStream 0.2.2 (the newest release; upstream is archived) needs three fixes to run here:
  1. `jax.tree_map` was removed from JAX; the orchestrator's `delete_pytree` calls it from the
     generate thread and a failing JetThread SIGKILLs the whole process. We alias it to
     `jax.tree.map` (same semantics) only when it is missing.
  2. Importing `jetstream.core.orchestrator` sets the root logger to DEBUG and adds a stdout
     handler, which floods every caller with per-step logs. We restore the previous root level and
     drop that handler right after the import.
  3. `server_lib._HOST` is "[::]" (all interfaces). We bind loopback unless told otherwise.
  4. `jetstream.engine.token_utils` (imported by engine_api and the orchestrator) imports
     `seqio.vocabularies`, which imports TensorFlow and tensorflow_datasets: 4-5 s of every start,
     TF's banners and CUDA probe on CPU hosts, TF's absl flags in `--helpfull`. JetStream uses two
     names from it: `Vocabulary` (annotations, and the base of its mock engine's TestVocab) and
     `SentencePieceVocabulary` (only in `load_vocab` for a SentencePiece model file; never on our
     paths). While token_utils is imported, stand-ins for `seqio` and `seqio.vocabularies` sit in
     sys.modules; they are removed right after, so a later `import seqio` gets the real package.
     The SentencePiece stand-in imports the real seqio when called. Skipped when seqio is already
     imported (the caller's real one is used).
Every fix is idempotent; `apply()` is called by every module of tmax_jax.inference that touches
JetStream, before importing anything of JetStream's engine or core.
"""

import abc
import contextlib
import logging
import sys
import threading
import types

import jax

LOOPBACK = "127.0.0.1"
_LOCK = threading.Lock()
_APPLIED = False


def _alias_tree_map() -> None:
  if not hasattr(jax, "tree_map"):
    # Why: 0.2.2 calls jax.tree_map(delete_leaf, prefix) after every insert.
    jax.tree_map = jax.tree.map  # type: ignore[attr-defined]  # the shim adds what jax removed


class SeqioVocabularyStandIn(metaclass=abc.ABCMeta):  # noqa: B024  (an ABC like seqio's)
  """`seqio.vocabularies.Vocabulary` as JetStream 0.2.2 uses it (fix 4): a type in annotations and
  the base class of `mock_utils.TestVocab`, which defines every member it calls."""


def sentencepiece_vocabulary(*args, **kwargs):
  """`seqio.vocabularies.SentencePieceVocabulary(...)` (fix 4), imported when first called."""
  # Lazy on purpose: seqio imports TensorFlow, needed only for SentencePiece model files.
  from seqio.vocabularies import (  # noqa: PLC0415  (seqio loads TensorFlow)
    SentencePieceVocabulary,
  )

  return SentencePieceVocabulary(*args, **kwargs)


def _seqio_stand_ins() -> dict[str, types.ModuleType]:
  package, vocabularies = types.ModuleType("seqio"), types.ModuleType("seqio.vocabularies")
  package.__path__ = []  # a package, so `seqio.vocabularies` resolves through sys.modules
  # stand-in modules are filled at runtime; mypy knows ModuleType with no attributes
  package.vocabularies = vocabularies  # type: ignore[attr-defined]
  vocabularies.Vocabulary = SeqioVocabularyStandIn  # type: ignore[attr-defined]
  vocabularies.SentencePieceVocabulary = sentencepiece_vocabulary  # type: ignore[attr-defined]
  return {"seqio": package, "seqio.vocabularies": vocabularies}


def _import_token_utils_without_seqio() -> None:
  if "seqio" in sys.modules or "jetstream.engine.token_utils" in sys.modules:
    return
  stand_ins = _seqio_stand_ins()
  sys.modules.update(stand_ins)
  try:
    # imported while the stand-ins sit
    from jetstream.engine import token_utils  # noqa: F401, PLC0415
  finally:
    for name, module in stand_ins.items():
      if sys.modules.get(name) is module:
        del sys.modules[name]


def _import_orchestrator_quietly() -> None:
  root = logging.getLogger()
  level, handlers = root.level, list(root.handlers)
  # imported for its logging side effect
  from jetstream.core import orchestrator  # noqa: F401, PLC0415

  root.setLevel(level)
  for h in list(root.handlers):
    if h not in handlers:
      root.removeHandler(h)


def apply() -> None:
  """Applies fixes 1, 2 and 4 once per process (thread-safe)."""
  global _APPLIED
  with _LOCK:
    if _APPLIED:
      return
    _alias_tree_map()
    _import_token_utils_without_seqio()
    _import_orchestrator_quietly()
    _APPLIED = True


def set_bind_host(host: str = LOOPBACK) -> None:
  """Sets the address JetStreamServer binds (fix 3). '[::]' or '0.0.0.0' opt into all interfaces."""
  apply()
  from jetstream.core import server_lib  # noqa: PLC0415  (JetStream loads after apply())

  server_lib._HOST = host


@contextlib.contextmanager
def bind_host(host: str = LOOPBACK):
  """Temporarily sets the bind host; servers are constructed (and bound) inside the block."""
  apply()
  from jetstream.core import server_lib  # noqa: PLC0415  (JetStream loads after apply())

  old = server_lib._HOST
  set_bind_host(host)
  try:
    yield
  finally:
    server_lib._HOST = old
