"""Accelerator compilers without the accelerator: published chip specs (chips.py), the compiler
venv with libtpu (toolchain.py) and compile-only devices of a real topology (targets.py).

The face (`__all__`, checked by tests/test_faces.py): Chip and the three modules, used whole;
gpu_targets/ (XLA:GPU's target descriptions) is internal."""

from tmax_jax.aot.chips import Chip

__all__ = ["Chip", "chips", "targets", "toolchain"]
