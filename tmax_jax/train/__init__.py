"""The trainer: typed train configs, the jitted DPPO/GRPO/SFT step over a sharded mesh (gradient
accumulation, packed micro-batches), the Optax optimizer, Orbax checkpoints of the train state,
metrics writing and multi-host helpers.

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.train`, import the names
below from here, and the public modules listed in `__all__` whole; compact.py and topk.py are
internal. The configs load with the package; the rest loads on first use (Optax, Orbax and the
jitted step stay out of a config-only import).
"""

from typing import TYPE_CHECKING

from tmax_jax import lazy_face
from tmax_jax.train.config import (
  BatchInputs,
  CheckpointConfig,
  LossConfig,
  OptimizerConfig,
  PackingConfig,
  TrainConfig,
)

if TYPE_CHECKING:  # the lazy names' homes (the same as _HOMES), for mypy and the import graph
  from tmax_jax.train.batch import PackedBatch, TrainBatch
  from tmax_jax.train.checkpoint import Checkpointer, model_metadata
  from tmax_jax.train.distributed import initialize
  from tmax_jax.train.metrics import MetricsWriter, read_jsonl
  from tmax_jax.train.state import TrainState
  from tmax_jax.train.step import Trainer

_HOMES = {
  "PackedBatch": "batch",
  "TrainBatch": "batch",
  "Checkpointer": "checkpoint",
  "model_metadata": "checkpoint",
  "initialize": "distributed",
  "MetricsWriter": "metrics",
  "read_jsonl": "metrics",
  "TrainState": "state",
  "Trainer": "step",
}
__getattr__ = lazy_face(__name__, _HOMES)

__all__ = [
  # configs
  "BatchInputs",
  "CheckpointConfig",
  "LossConfig",
  "OptimizerConfig",
  "PackingConfig",
  "TrainConfig",
  # the trainer and what it reads and keeps (loaded on first use)
  "Checkpointer",
  "MetricsWriter",
  "PackedBatch",
  "TrainBatch",
  "TrainState",
  "Trainer",
  "initialize",
  "model_metadata",
  "read_jsonl",
  # public modules, used whole
  "batch",  # trainer rows: packing, micro-batches, the batch records
  "checkpoint",  # Orbax checkpoints of the train state and the model's metadata
  "distributed",  # multi-host start-up and host-local helpers
  "optimizer",  # the Optax optimizer from OptimizerConfig
  "state",  # the train state and its shardings
  "step",  # the jitted train step and the Trainer around it
]
