"""tmax_jax: the TMAX terminal-agent RL recipe as one JAX stack."""

from tmax_jax import host_memory

__version__ = "0.1.0"

host_memory.reuse_freed_memory()  # before XLA:CPU's first allocation (host_memory docstring)
