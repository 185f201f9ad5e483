"""Random weights whose replies end (models/dummy_weights.py, issue 47 point 3): through the real
model forward, the end-of-turn token has probability ~1/N after any context and every other token
a small one; tied and untied heads, scanned and unrolled layers, Qwen3 and Qwen3.5 (gated DeltaNet
layers, zero-centred norms). A plain random init ends a reply with p ~ 1/V. The default suite
runs Qwen3 on a 1024-token vocabulary; the slow one every case, also with the real vocabularies
and end-of-turn ids."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.models import dummy_weights, registry
from tmax_jax.models.qwen3_5.config import Qwen3_5Config, default_layer_types

N = 16  # mean reply length asked for
SMALL_VOCAB, SMALL_STOP = 1024, 1000
SHAPES = dict(
  hidden_size=16,
  intermediate_size=32,
  num_attention_heads=2,
  num_key_value_heads=1,
  head_dim=8,
)
QWEN3_5 = dict(
  num_hidden_layers=4,
  family_config=Qwen3_5Config(
    layer_types=default_layer_types(4),
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=2,
    chunk_size=8,
  ),
)
UNTIED_UNROLLED = dict(num_hidden_layers=2, tie_word_embeddings=False, scan_layers=False)
SLOW = pytest.mark.slow  # 20-70 s each on a loaded 2-core machine (compiles; a 150k+ vocabulary)
CASES = [
  pytest.param("qwen3-0.6b", dict(num_hidden_layers=2), True, id="qwen3-tied"),
  pytest.param("qwen3-8b", UNTIED_UNROLLED, True, id="qwen3-untied-unrolled", marks=SLOW),
  pytest.param("qwen3.5-9b", QWEN3_5, True, id="qwen3.5", marks=SLOW),
  pytest.param("qwen3-0.6b", dict(num_hidden_layers=2), False, id="qwen3-tied-real", marks=SLOW),
  pytest.param("qwen3-8b", UNTIED_UNROLLED, False, id="qwen3-untied-real", marks=SLOW),
  pytest.param("qwen3.5-9b", QWEN3_5, False, id="qwen3.5-real", marks=SLOW),
]


def _probabilities(cfg, params, stop: int):
  """(p(stop) [16], the other tokens' probabilities [16, V-1]) at the last position of 16 random
  contexts of 6 tokens."""
  tokens = jax.random.randint(jax.random.key(1), (16, 6), 0, min(cfg.vocab_size, 150000))
  positions = jnp.broadcast_to(jnp.arange(6), tokens.shape)
  apply = jax.jit(registry.build_model(cfg).apply)
  hidden, _ = apply({"params": params}, tokens, positions, jnp.ones_like(tokens))
  logits = hidden[:, -1].astype(jnp.float32) @ registry.head_weight(params, cfg).astype(jnp.float32)
  probs = np.asarray(jax.nn.softmax(logits, axis=-1))  # [16, V]
  return probs[:, stop], np.delete(probs, stop, axis=1)


@pytest.mark.parametrize("preset, overrides, small", CASES)
def test_replies_end_after_about_n_tokens(preset, overrides, small):
  vocab = dict(vocab_size=SMALL_VOCAB) if small else {}
  cfg = registry.preset(preset, **SHAPES, **overrides, **vocab)
  stop = SMALL_STOP if small else registry.tokenizer_for(cfg.model_type).eos_token_id
  init = registry.init_params(cfg, jax.random.key(0))
  p_stop, _ = _probabilities(cfg, init, stop)
  assert p_stop.max() < 0.1 / N  # plain random: a reply (almost) never ends
  shapes = jax.tree.map(lambda x: (x.shape, x.dtype), init)
  params = dummy_weights.end_replies(init, cfg, N, stop=stop if small else None)
  assert jax.tree.map(lambda x: (x.shape, x.dtype), params) == shapes
  assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(params))
  p_stop, others = _probabilities(cfg, params, stop)
  assert abs(p_stop.mean() - 1 / N) < 0.25 / N, p_stop
  assert p_stop.min() > 0.5 / N and p_stop.max() < 2 / N, p_stop
  assert others.max() < 0.1 / N  # the reply itself: random tokens, none favoured


def test_refused():
  """Before any weight is touched."""
  cfg = registry.preset("qwen3-0.6b", **SHAPES, num_hidden_layers=1)
  with pytest.raises(ValueError, match="mean_tokens=1"):
    dummy_weights.end_replies(None, cfg, 1)
  small = registry.preset("qwen3-0.6b", **SHAPES, num_hidden_layers=1, vocab_size=256)
  with pytest.raises(ValueError, match="token 151645 is outside the model's vocab_size=256"):
    dummy_weights.end_replies(None, small, N)
