"""Compatibility shim for google-jetstream 0.2.2 on current JAX (the only monkeypatching we do).

JetStream 0.2.2 (the newest release; upstream is archived) needs three fixes to run here:
  1. `jax.tree_map` was removed from JAX; the orchestrator's `delete_pytree` calls it from the
     generate thread and a failing JetThread SIGKILLs the whole process. We alias it to
     `jax.tree.map` (same semantics) only when it is missing.
  2. Importing `jetstream.core.orchestrator` sets the root logger to DEBUG and adds a stdout
     handler, which floods every caller with per-step logs. We restore the previous root level and
     drop that handler right after the import.
  3. `server_lib._HOST` is "[::]" (all interfaces). We bind loopback unless told otherwise.
Every fix is idempotent; `apply()` is called by every module of tmax_jax.inference that touches
JetStream, before importing the orchestrator.
"""

import contextlib
import logging
import threading

import jax

LOOPBACK = "127.0.0.1"
_LOCK = threading.Lock()
_APPLIED = False


def _alias_tree_map() -> None:
  if not hasattr(jax, "tree_map"):
    # Why: 0.2.2 calls jax.tree_map(delete_leaf, prefix) after every insert.
    jax.tree_map = jax.tree.map


def _import_orchestrator_quietly() -> None:
  root = logging.getLogger()
  level, handlers = root.level, list(root.handlers)
  # pylint: disable-next=import-outside-toplevel,unused-import
  from jetstream.core import orchestrator  # noqa: F401 (imported for its logging side effect)

  root.setLevel(level)
  for h in list(root.handlers):
    if h not in handlers:
      root.removeHandler(h)


def apply() -> None:
  """Applies fixes 1 and 2 once per process (thread-safe)."""
  global _APPLIED
  with _LOCK:
    if _APPLIED:
      return
    _alias_tree_map()
    _import_orchestrator_quietly()
    _APPLIED = True


def set_bind_host(host: str = LOOPBACK) -> None:
  """Sets the address JetStreamServer binds (fix 3). '[::]' or '0.0.0.0' opt into all interfaces."""
  apply()
  from jetstream.core import server_lib  # pylint: disable=import-outside-toplevel

  server_lib._HOST = host  # pylint: disable=protected-access


@contextlib.contextmanager
def bind_host(host: str = LOOPBACK):
  """Temporarily sets the bind host; servers are constructed (and bound) inside the block."""
  apply()
  from jetstream.core import server_lib  # pylint: disable=import-outside-toplevel

  old = server_lib._HOST  # pylint: disable=protected-access
  set_bind_host(host)
  try:
    yield
  finally:
    server_lib._HOST = old  # pylint: disable=protected-access
