"""Random weights from a ModelSpec (issue 47 point 3): `model.random` serves a checkpoint's
architecture from its config.json alone (vLLM's --load-format dummy; the preflight asks for no
safetensors then), `model.random_reply_tokens` gives random weights whose replies end, and is left
out (logged) when the weights are a checkpoint's."""

import json
import logging

import jax
import numpy as np
import pytest

from tmax_jax.errors import ConfigError
from tmax_jax.loop.config import ModelSpec, ServeConfig
from tmax_jax.loop.policy import model_from_spec
from tmax_jax.loop.preflight import check_inputs
from tmax_jax.models import hf_io, registry

TINY = dict(
  hidden_size=16,
  intermediate_size=32,
  num_hidden_layers=2,
  num_attention_heads=2,
  num_key_value_heads=1,
  head_dim=8,
)


def _shapes(tree):
  return jax.tree.map(lambda x: tuple(x.shape), tree)


def test_random_reads_only_the_checkpoints_config(tmp_path):
  cfg = registry.preset("qwen3-0.6b", **TINY)  # the real vocabulary: the reply can end
  hf = registry.family_for(cfg.model_type).to_hf(cfg)
  (tmp_path / "config.json").write_text(json.dumps(hf))  # no weights
  spec = ModelSpec(checkpoint=str(tmp_path), random=True, random_reply_tokens=8)
  check_inputs(ServeConfig(model=spec))  # config.json is all it reads
  with pytest.raises(ConfigError, match="no \\*.safetensors weights"):
    check_inputs(ServeConfig(model=ModelSpec(checkpoint=str(tmp_path))))
  loaded, params_fn = model_from_spec(spec)
  assert (loaded.hidden_size, loaded.vocab_size) == (16, 151936)
  params = params_fn()
  assert _shapes(params) == _shapes(registry.abstract_params(loaded))
  layers = jax.tree.leaves(params["model"]["layers"])
  assert all(not np.asarray(x).any() for x in layers)  # the replies-end reshaping was applied


def test_random_reply_tokens_leave_a_checkpoints_weights_alone(tmp_path, caplog):
  cfg = registry.preset("qwen3-0.6b", **TINY, vocab_size=256)
  saved = jax.tree.map(np.asarray, registry.init_params(cfg, jax.random.key(3)))
  hf_io.save_pretrained(tmp_path / "ckpt", saved, cfg)
  spec = ModelSpec(checkpoint=str(tmp_path / "ckpt"), random_reply_tokens=8)
  with caplog.at_level(logging.INFO, logger="tmax_jax.loop.policy"):
    _, params_fn = model_from_spec(spec)
  jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, params_fn()), saved)
  assert "model.random_reply_tokens=8: not applied" in caplog.text


@pytest.mark.parametrize("n", [-1, 1])
def test_random_reply_tokens_must_be_off_or_at_least_two(n):
  with pytest.raises(ValueError, match=f"model.random_reply_tokens={n}"):
    ModelSpec(random_reply_tokens=n)
