"""Shared tiny model for the trainer tests (a real Qwen3-shaped Flax model, fp32)."""

import jax
import numpy as np
import pytest

from tmax_jax.models import registry
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import toy


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
    out.append(batch_lib.Trajectory(
      tokens=rng.integers(0, vocab, length), loss_mask=mask,
      behaviour_logp=np.log(rng.uniform(0.02, 0.3, length)), advantage=float(rng.normal()),
      ref_logp=np.log(rng.uniform(0.02, 0.3, length))))
  return out
