"""The optimizer state lives where its params live: Adam's mu / nu take the FSDP x tensor
shardings of their params (XLA alone would leave optax's zeros_like unsharded), counts are
replicated on the mesh."""

import jax
import pytest
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig
from tmax_jax.train.config import OptimizerConfig, TrainConfig
from tmax_jax.train.step import Trainer

CFG = ModelConfig(
  vocab_size=256,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  tie_word_embeddings=False,
)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_optimizer_state_takes_the_params_shardings(weight_decay):
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  shardings = registry.param_shardings(CFG, mesh)
  params = registry.init_params(CFG, jax.random.key(0), shardings)
  cfg = TrainConfig(optimizer=OptimizerConfig(weight_decay=weight_decay))
  state = Trainer(registry.build_model(CFG), CFG, cfg, mesh).init_state(params)
  adam = [
    s
    for s in jax.tree.leaves(state.opt_state, is_leaf=lambda x: hasattr(x, "mu"))
    if hasattr(s, "mu")
  ]
  assert len(adam) == 1
  for moment in (adam[0].mu, adam[0].nu):
    for got, want in zip(jax.tree.leaves(moment), jax.tree.leaves(shardings), strict=True):
      assert got.sharding == want
  assert adam[0].count.sharding.spec == P() and len(adam[0].count.sharding.device_set) == 8
  q = adam[0].mu["model"]["layers"]["self_attn"]["q_proj"]["kernel"]
  assert q.addressable_shards[0].data.shape == (2, 16, 2, 8)  # [L, D/2, N/2, H]
