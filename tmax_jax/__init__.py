"""tmax_jax: the TMAX terminal-agent RL recipe as one JAX stack."""

__version__ = "0.1.0"
