"""Full-model fp32 parity against transformers (Qwen2 with bias, Qwen3 tied / untied), including
the export -> from_pretrained round trip and yarn rope scaling."""

import jax.numpy as jnp
import numpy as np
import pytest
import qwen_ref
import transformers

from tmax_jax.models import build_model, full_logits, head_weight, hf_io

TOL = 1e-4


def our_logits(cfg, params, tokens, positions, mask):
  hidden, _ = build_model(cfg).apply(
    {"params": params}, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask)
  )
  return np.asarray(full_logits(hidden, head_weight(params, cfg), cfg.dtypes.head))


@pytest.mark.parametrize("variant", sorted(qwen_ref.VARIANTS))
@pytest.mark.parametrize("scan_layers", [True, False])
def test_parity_and_round_trip(variant, scan_layers, tmp_path):
  ref_model = qwen_ref.torch_model(qwen_ref.hf_config(variant))
  ref_model.save_pretrained(tmp_path / "hf")
  cfg, params = hf_io.load_pretrained(tmp_path / "hf", scan_layers=scan_layers)
  assert cfg.tie_word_embeddings == ref_model.config.tie_word_embeddings
  tokens, positions, mask = qwen_ref.batch()
  ref = qwen_ref.torch_logits(ref_model, tokens, positions, mask)
  ours = our_logits(cfg, params, tokens, positions, mask)
  assert qwen_ref.rel_err(ours, ref, mask) <= TOL

  hf_io.save_pretrained(tmp_path / "export", params, cfg)
  reloaded = (
    transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "export", attn_implementation="eager"
    )
    .float()
    .eval()
  )
  assert type(reloaded) is type(ref_model)
  again = qwen_ref.torch_logits(reloaded, tokens, positions, mask)
  assert qwen_ref.rel_err(again, ref, mask) <= TOL
  for name, p in ref_model.state_dict().items():
    np.testing.assert_array_equal(reloaded.state_dict()[name].numpy(), p.numpy(), err_msg=name)


def test_yarn_rope_parity(tmp_path):
  yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
  ref_model = qwen_ref.torch_model(qwen_ref.hf_config("qwen3_untied", rope_extra=yarn))
  ref_model.save_pretrained(tmp_path / "hf")
  cfg, params = hf_io.load_pretrained(tmp_path / "hf")
  assert cfg.rope_scaling.rope_type == "yarn" and cfg.rope_scaling.factor == 4.0
  tokens, _, mask = qwen_ref.batch(t=40)
  positions = np.broadcast_to(np.arange(40) * 5, tokens.shape).astype(np.int32)  # past 64
  mask = np.ones_like(mask)
  ref = qwen_ref.torch_logits(ref_model, tokens, positions, mask)
  assert qwen_ref.rel_err(our_logits(cfg, params, tokens, positions, mask), ref, mask) <= TOL
