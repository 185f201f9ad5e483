"""Accelerator compilers without the accelerator: published chip specs (chips.py), the compiler
venv with libtpu (toolchain.py) and compile-only devices of a real topology (targets.py)."""
