"""The trainer: typed train configs, the jitted DPPO/GRPO/SFT step over a sharded mesh (gradient
accumulation, packed micro-batches), the Optax optimizer, Orbax checkpoints of the train state,
metrics writing and multi-host helpers."""
