"""The rehearsal of a shipped config: `python3 -m tmax_jax.rehearse --config=configs/X.py` runs the
config as shipped except for size, on 8 fake CPU devices, through the real jobs (JetStream server,
sandboxes, Orbax checkpoints, HF export), and prints what it shrank and what it kept.

shrink.py  the shipped config -> its rehearsal (pure: the mesh rule, tiny dims, what changed why)
tasks.py   the rehearsal's TB2 tasks (coin-flip verifiers for RL, procedural tasks for eval)
run.py     running it and checking what a user would meet (steps ran, resume, export, trials)
"""

from tmax_jax import cache

DEVICES = 8  # the fake CPU devices a rehearsal's meshes use
# The process makes 32: XLA:CPU runs every participant of a collective on a worker of one
# intra-op pool of max(cores, devices) threads and blocks it until the others arrive. A program
# whose devices reach two independent collectives in different orders can then hold every worker
# with no participant left to arrive: the 27B rehearsal's train step (fsdp 2 x sequence 4) hung
# with 6 workers in a sequence-group all-gather and 2 in a collective-permute of the same run
# (issue 30's rehearsal). 32 workers leave room for that and for the colocated server's
# programs beside it; the meshes use the first 8 devices, the others stay idle.
HOST_DEVICES = 32
# XLA:CPU flags of the rehearsal; a collective waits up to 15 minutes for its device threads (the
# default 40 s aborts the process on a loaded 2-core machine).
DEVICE_FLAGS = (
  f"--xla_force_host_platform_device_count={HOST_DEVICES} "
  "--xla_cpu_collective_call_terminate_timeout_seconds=900 "
  "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120"
)


def default_xla_cache() -> str:
  """The rehearsal's persistent compilation cache, under the machine's tmax_jax cache root."""
  return str(cache.root() / "rehearse_xla")
