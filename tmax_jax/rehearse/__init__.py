"""The rehearsal of a shipped config: `python3 -m tmax_jax.rehearse --config=configs/X.py` runs the
config as shipped except for size, on 8 fake CPU devices, through the real jobs (JetStream server,
sandboxes, Orbax checkpoints, HF export), and prints what it shrank and what it kept.

shrink.py  the shipped config -> its rehearsal (pure: the mesh rule, tiny dims, what changed why)
tasks.py   the rehearsal's TB2 tasks (coin-flip verifiers for RL, procedural tasks for eval)
run.py     running it and checking what a user would meet (steps ran, resume, export, trials)
"""

from tmax_jax import cache

# XLA:CPU flags of the rehearsal: 8 fake devices; a collective waits up to 15 minutes for its
# device threads (the default 40 s aborts the process on a loaded 2-core machine).
DEVICE_FLAGS = (
  "--xla_force_host_platform_device_count=8 "
  "--xla_cpu_collective_call_terminate_timeout_seconds=900 "
  "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120"
)


def default_xla_cache() -> str:
  """The rehearsal's persistent compilation cache, under the machine's tmax_jax cache root."""
  return str(cache.root() / "rehearse_xla")
