"""Shared tiny model for the trainer tests (a real Qwen3-shaped Flax model, fp32)."""

import jax
import numpy as np
import pytest

from tests.train import toy
from tmax_jax.models import registry
from tmax_jax.train import batch as batch_lib


@pytest.fixture(scope="session")
def tiny():
  mcfg = toy.model_config(toy.ToyConfig())
  model = registry.build_model(mcfg)
  params = registry.init_params(mcfg, jax.random.key(1))
  return model, mcfg, params


def random_trajectories(seed: int, n: int, max_len: int, vocab: int = 16):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    length = int(rng.integers(5, max_len + 1))
    mask = (np.arange(length) >= int(rng.integers(1, 4))).astype(np.float32)
    out.append(
      batch_lib.Trajectory(
        tokens=rng.integers(0, vocab, length),
        loss_mask=mask,
        behaviour_logp=np.log(rng.uniform(0.02, 0.3, length)),
        advantage=float(rng.normal()),
        ref_logp=np.log(rng.uniform(0.02, 0.3, length)),
      )
    )
  return out


@pytest.fixture(scope="session")
def tiny_qwen3_5():
  """A tiny Qwen3.5 (one Gated DeltaNet + one gated-attention layer, chunk 4), fp32, at its random
  init like `tiny`. (With every weight perturbed by N(0, 0.2), as the model parity tests do, the
  Gated DeltaNet input gradients of differently packed batches differ by up to ~7e-6 from fp32
  summation order alone; docs/design/training.md "Packed micro-batches".)"""
  from tmax_jax.models.qwen3_5.config import Qwen3_5Config
  from tmax_jax.models.qwen3_5.presets import qwen3_5

  fam = Qwen3_5Config(
    layer_types=("linear_attention", "full_attention"),
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    chunk_size=4,
  )
  mcfg = qwen3_5(
    "0.8b",
    vocab_size=16,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    tie_word_embeddings=False,
    max_position_embeddings=64,
    family_config=fam,
  )
  return registry.build_model(mcfg), mcfg, registry.init_params(mcfg, jax.random.key(2))
