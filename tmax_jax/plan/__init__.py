"""The plan of a job on a device topology: its memory on fake CPU devices (memory.py) and its
programs compiled for a real accelerator topology (programs.py); `python3 -m tmax_jax.plan`.

The face (`__all__`, checked by tests/test_faces.py): the memory plan's names below, and programs.py
as a public module (the rehearsal compiles with it)."""

from tmax_jax.plan.memory import (
  GB,
  Plan,
  abstract_batch,
  abstract_state,
  compiled_micro_memory,
  compiled_step_memory,
  compiled_update_memory,
  layer_period,
  plan_job,
  server_cache_bytes,
  server_memory,
  trainer_memory,
  with_layers,
)

__all__ = [
  "GB",
  "Plan",
  "abstract_batch",
  "abstract_state",
  "compiled_micro_memory",
  "compiled_step_memory",
  "compiled_update_memory",
  "layer_period",
  "plan_job",
  "server_cache_bytes",
  "server_memory",
  "trainer_memory",
  "with_layers",
  "programs",  # public module: a job's programs compiled for a real topology
]
