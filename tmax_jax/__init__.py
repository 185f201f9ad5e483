"""tmax_jax: the TMAX terminal-agent RL recipe as one JAX stack.

Importing the package (or any module of it) changes no process-wide setting; entry points that
run XLA:CPU programs (launch/*.py, bench/*.py, the tests) call host_memory.reuse_freed_memory()
first.
"""

__version__ = "0.1.0"
