"""Qwen3.5 full-model fp32 parity against transformers: Qwen3_5ForCausalLM (padded batch, scanned
and unscanned), the text path of Qwen3_5ForConditionalGeneration, and export -> from_pretrained."""

import json
import logging

import numpy as np
import pytest
import qwen3_5_ref as ref_lib
import transformers

from tmax_jax.models import hf_io
from tmax_jax.models.qwen3_5 import load_pretrained

TOL = 1e-4


def _assert_export_round_trip(params, cfg, ref_logits, batch, out_dir):
  hf_io.save_pretrained(out_dir, params, cfg)
  config = json.loads((out_dir / "config.json").read_text())
  assert config["architectures"] == ["Qwen3_5ForCausalLM"] and "vision_config" not in config
  reloaded = (
    transformers.AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager")
    .float()
    .eval()
  )
  assert type(reloaded) is transformers.Qwen3_5ForCausalLM
  again = ref_lib.torch_logits(reloaded, *batch)
  assert ref_lib.rel_err(again, ref_logits, batch[2]) <= TOL
  return reloaded


@pytest.mark.parametrize(
  "scan_layers",
  [True, pytest.param(False, marks=pytest.mark.slow)],  # 12 s: slow suite
)
def test_causal_lm_parity_and_round_trip(scan_layers, tmp_path):
  ref_model = ref_lib.causal_lm()
  ref_model.save_pretrained(tmp_path / "hf")
  cfg, params = load_pretrained(tmp_path / "hf", scan_layers=scan_layers)
  assert cfg.model_type == "qwen3_5_text" and cfg.partial_rotary_factor == 0.25
  assert cfg.family_config.layer_types == tuple(ref_model.config.layer_types)
  cfg = ref_lib.with_chunk_size(cfg, 8)  # T=21: several chunks and a ragged tail
  batch = ref_lib.padded_batch()
  ref = ref_lib.torch_logits(ref_model, *batch)
  ours = ref_lib.our_logits(cfg, params, *batch)
  assert ref_lib.rel_err(ours, ref, batch[2]) <= TOL

  reloaded = _assert_export_round_trip(params, cfg, ref, batch, tmp_path / "export")
  for name, p in ref_model.state_dict().items():
    np.testing.assert_array_equal(reloaded.state_dict()[name].numpy(), p.numpy(), err_msg=name)


def test_conditional_generation_text_path(tmp_path, caplog):
  ref_model = ref_lib.conditional_generation(seed=1)
  ref_model.save_pretrained(tmp_path / "hf")
  header_keys = hf_io.index_checkpoint(tmp_path / "hf")
  assert any(k.startswith("model.visual.") for k in header_keys)
  with caplog.at_level(logging.INFO, logger="tmax_jax.models.qwen3_5.checkpoint"):
    cfg, params = load_pretrained(tmp_path / "hf")
  lines = [r.getMessage() for r in caplog.records if "not ported" in r.getMessage()]
  assert len(lines) == 1 and "model.visual." in lines[0]
  batch = ref_lib.padded_batch(seed=2)
  ref = ref_lib.torch_logits(ref_model, *batch)  # text-only input: the vision tower is unused
  ours = ref_lib.our_logits(cfg, params, *batch)
  assert ref_lib.rel_err(ours, ref, batch[2]) <= TOL
  reloaded = _assert_export_round_trip(params, cfg, ref, batch, tmp_path / "export")
  text_sd = ref_model.model.language_model.state_dict()
  for name, p in reloaded.model.state_dict().items():
    np.testing.assert_array_equal(p.numpy(), text_sd[name].numpy(), err_msg=name)


def test_tied_embeddings_and_default_layer_types(tmp_path):
  """No layer_types in config.json -> HF's full_attention_interval default; tied head."""
  ref_model = ref_lib.causal_lm(
    seed=3, tie_word_embeddings=True, layer_types=None, full_attention_interval=2
  )
  ref_model.save_pretrained(tmp_path / "hf")
  raw = json.loads((tmp_path / "hf" / "config.json").read_text())
  raw.pop("layer_types")
  raw["full_attention_interval"] = 2
  (tmp_path / "hf" / "config.json").write_text(json.dumps(raw))
  cfg, params = load_pretrained(tmp_path / "hf")
  assert cfg.tie_word_embeddings and "lm_head" not in params
  assert cfg.family_config.layer_types == tuple(ref_model.config.layer_types)
  batch = ref_lib.padded_batch(seed=4, t=12)
  ref = ref_lib.torch_logits(ref_model, *batch)
  assert ref_lib.rel_err(ref_lib.our_logits(cfg, params, *batch), ref, batch[2]) <= TOL


def test_missing_tensor_is_named(tmp_path):
  ref_model = ref_lib.causal_lm()
  sd = {k: v for k, v in ref_model.state_dict().items() if "layers.2.linear_attn.A_log" not in k}
  ref_model.save_pretrained(tmp_path / "hf", state_dict=sd)
  with pytest.raises(hf_io.CheckpointError, match=r"model\.layers\.2\.linear_attn\.A_log"):
    load_pretrained(tmp_path / "hf")
