"""Orbax checkpoints of the whole train state plus the data position, with exact resume.

A checkpoint is `<directory>/<step>/{state, data}`: `state` the TrainState pytree (params, optimizer
state, step, RNG key data) through StandardSave, `data` a JSON dict (data-loader position, anything
the loop needs to continue exactly). Orbax writes into a temporary directory and renames it when
complete (atomic); uncommitted temporaries left by a killed run are removed on start. Saves are
async: training continues while the previous step is written. A state with any NaN/inf is never
saved (NonFiniteStateError). Retention (Orbax preservation policies): the last `keep_last`, plus
every multiple of `keep_every` for good. The directory's root metadata (`model_metadata`) names
the model, so a kept step exports to HF without the job's config (`read_params`, tmax_jax.export).
"""

import logging
import os
from typing import Any

import jax
import numpy as np

# orbax logs through absl while it is imported, and absl's log() calls logging.basicConfig() when
# the root logger has no handler: a process-wide change that importing this library must not make
# (tests/test_host_memory.py). The handler it adds is taken off again.
_ROOT_HANDLERS = list(logging.getLogger().handlers)
import orbax.checkpoint as ocp  # noqa: E402
from orbax.checkpoint.checkpoint_managers import preservation_policy as keep  # noqa: E402

for _handler in logging.getLogger().handlers[len(_ROOT_HANDLERS) :]:
  logging.getLogger().removeHandler(_handler)

from tmax_jax import errors  # noqa: E402
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.train import state as state_lib  # noqa: E402
from tmax_jax.train.config import CheckpointConfig  # noqa: E402

log = logging.getLogger(__name__)
ITEMS = ("state", "data")


class NonFiniteStateError(RuntimeError):
  """Refused to checkpoint a state holding NaN or inf."""


def model_metadata(model_cfg: ModelConfig, tokenizer_family: str = "") -> dict:
  """What an HF export of a kept step needs besides the params: the architecture as its HF config,
  the param layout (scan_layers) and the tokenizer family ("" = no tokenizer files)."""
  return {
    "hf_config": registry.family_for(model_cfg.model_type).to_hf(model_cfg),
    "scan_layers": model_cfg.scan_layers,
    "tokenizer_family": tokenizer_family,
  }


def model_from_metadata(meta: dict) -> ModelConfig:
  """The ModelConfig (fp32, the checkpoint's param layout) `model_metadata` describes."""
  return registry.from_hf_config(meta["hf_config"], scan_layers=meta["scan_layers"])


class Checkpointer:
  """Thin wrapper over ocp.CheckpointManager: save every N steps, keep the last K and every
  `keep_every`-th for good, async. `metadata` (model_metadata) is written to the directory once."""

  def __init__(self, cfg: CheckpointConfig, metadata: dict | None = None):
    if not cfg.directory:
      raise ValueError("checkpoint.directory is empty; expected a directory path")
    self.cfg = cfg
    policy = keep.LatestN(cfg.keep_last)
    if cfg.keep_every:
      policy = keep.AnyPreservationPolicy([policy, keep.EveryNSteps(cfg.keep_every)])
    options = ocp.CheckpointManagerOptions(
      save_interval_steps=1,
      preservation_policy=policy,
      create=True,
      enable_async_checkpointing=cfg.async_save,
      cleanup_tmp_directories=True,
    )
    # Orbax needs an absolute path (a relative one fails at the first save, not here)
    self._manager = ocp.CheckpointManager(
      os.path.abspath(cfg.directory), options=options, item_names=ITEMS, metadata=metadata
    )

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(
    self, step: int, state: state_lib.TrainState, data: dict, *, force: bool = False
  ) -> bool:
    """Saves when `step` is a multiple of `save_every` or `keep_every` (or `force`); returns
    whether it saved.

    The interval is decided here, not by Orbax (whose policy also saves the first step seen). The
    finiteness check runs only for steps that will be written."""
    if not force and not self.cfg.saves(step):
      return False
    if not bool(state_lib.all_finite((state.params, state.opt_state))):
      raise NonFiniteStateError(f"refusing to checkpoint step {step}: the state holds NaN or inf")
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(state.as_dict()), data=ocp.args.JsonSave(dict(data))
    )
    return self._manager.save(step, args=args, force=True)

  def restore(
    self, abstract_state: Any, step: int | None = None
  ) -> tuple[state_lib.TrainState, dict, int]:
    """-> (state, data, step) of `step` (default: latest). `abstract_state` is a TrainState (or its
    jax.eval_shape / ShapeDtypeStruct tree with shardings) giving structure, dtypes and
    shardings."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.cfg.directory}")
    target = jax.tree.map(_abstract, abstract_state.as_dict())
    out = self._manager.restore(
      step,
      args=ocp.args.Composite(state=ocp.args.StandardRestore(target), data=ocp.args.JsonRestore()),
    )
    return state_lib.TrainState.from_dict(out["state"]), dict(out["data"]), step

  def wait(self) -> None:
    """Blocks until the pending async save is committed."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def _abstract(x):
  if isinstance(x, jax.ShapeDtypeStruct):
    return x
  return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))


def read_params(directory: str, step: int) -> tuple[Any, dict]:
  """-> (params of kept step `step` as host NumPy arrays, the directory's metadata dict), read
  without the optimizer state (an Orbax partial restore) and without the job's config. Raises
  FileNotFoundError / ValueError naming the directory and the kept steps."""
  path = os.path.abspath(directory)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"checkpoint directory {directory} does not exist")
  manager = ocp.CheckpointManager(
    path,
    options=ocp.CheckpointManagerOptions(read_only=True),
    item_names=ITEMS,
    item_handlers={"state": ocp.PyTreeCheckpointHandler(), "data": ocp.JsonCheckpointHandler()},
  )
  try:
    kept = sorted(manager.all_steps())
    if step not in kept:
      raise errors.UserError(
        f"step {step} is not a kept checkpoint in {directory}; kept steps: {kept}"
      )
    saved = manager.item_metadata(step)["state"].tree["params"]
    target = {"params": jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), saved)}
    restore = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
    out = manager.restore(
      step,
      args=ocp.args.Composite(
        state=ocp.args.PyTreeRestore(item=target, restore_args=restore, partial_restore=True)
      ),
    )
    return out["state"]["params"], dict(manager.metadata().custom_metadata or {})
  finally:
    manager.close()
