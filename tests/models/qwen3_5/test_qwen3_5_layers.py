"""Qwen3.5 pieces: the Gated DeltaNet layer against transformers' module with the same weights
(fp32, padded batch, prefill + decode through its cache), config parsing errors, preset parameter
counts (eval_shape vs transformers on the meta device), and the sharded forward on 8 fake CPU
devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import qwen3_5_ref as ref_lib
import torch
import transformers
from jax.sharding import PartitionSpec as P
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_mod

from tmax_jax import sharding
from tmax_jax.models import (
  UnsupportedConfigError,
  abstract_params,
  build_model,
  count_params,
  from_hf_config,
  full_logits,
  head_weight,
  init_params,
  registry,
)
from tmax_jax.models.qwen3_5 import to_hf
from tmax_jax.models.qwen3_5.gated_deltanet import GatedDeltaNet, init_state
from tmax_jax.models.qwen3_5.presets import PRESETS

TOL_MODULE = 1e-5


def _torch_gdn(seed=0):
  torch.manual_seed(seed)
  module = hf_mod.Qwen3_5GatedDeltaNet(ref_lib.text_config(), layer_idx=0).eval()
  with torch.no_grad():
    for p in module.parameters():
      p.normal_(0.0, 0.3)
  return module


def _our_params(module, cfg):
  """HF state dict -> our GatedDeltaNet params (layouts as in weights.py)."""
  sd = {k: v.detach().numpy() for k, v in module.state_dict().items()}

  def linear(name):
    return sd[f"{name}.weight"].T

  return {
    "in_proj_qkv": {"kernel": linear("in_proj_qkv")},
    "in_proj_z": {"kernel": linear("in_proj_z")},
    "in_proj_b": {"kernel": linear("in_proj_b")},
    "in_proj_a": {"kernel": linear("in_proj_a")},
    "conv1d": {"kernel": sd["conv1d.weight"]},
    "dt_bias": sd["dt_bias"],
    "A_log": sd["A_log"],
    "norm": {"scale": sd["norm.weight"]},
    "out_proj": {"kernel": linear("out_proj")},
  }


def _tiny_cfg(chunk_size=4, **overrides):
  return ref_lib.with_chunk_size(
    from_hf_config(ref_lib.text_config().to_dict(), **overrides), chunk_size
  )


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_gated_deltanet_matches_transformers_module():
  module = _torch_gdn()
  cfg = _tiny_cfg()
  ours = GatedDeltaNet(cfg.family_config, cfg.rms_norm_eps)
  params = _our_params(module, cfg)
  _, positions, mask = ref_lib.padded_batch(t=19)
  x = np.random.default_rng(0).normal(size=mask.shape + (cfg.hidden_size,)).astype(np.float32)
  with torch.no_grad():
    ref = module(torch.from_numpy(x), attention_mask=torch.from_numpy(mask).long()).numpy()
  out, _ = ours.apply({"params": params}, x, positions, mask)
  assert ref_lib.rel_err(out, ref, mask) <= TOL_MODULE

  # Prefill 11 tokens into the decode state, then single tokens: same outputs (recurrent form).
  full = np.ones_like(mask)
  pos = np.broadcast_to(np.arange(mask.shape[1]), mask.shape).astype(np.int32)
  with torch.no_grad():
    ref_full = module(torch.from_numpy(x)).numpy()
  state = init_state(cfg.family_config, x.shape[0], jnp.float32)
  got, state = ours.apply({"params": params}, x[:, :11], pos[:, :11], full[:, :11], state)
  outs = [np.asarray(got)]
  # A call in which a row has no live token (engine: empty slot) leaves that row's state as is.
  pad_only = np.zeros_like(full[:, :1])
  _, same = ours.apply({"params": params}, x[:, 11:12], pos[:, 11:12], pad_only, state)
  for key in ("conv", "recurrent"):
    np.testing.assert_array_equal(np.asarray(same[key]), np.asarray(state[key]), err_msg=key)
  for t in range(11, x.shape[1]):
    got, state = ours.apply(
      {"params": params}, x[:, t : t + 1], pos[:, t : t + 1], full[:, t : t + 1], state
    )
    outs.append(np.asarray(got))
  assert ref_lib.rel_err(np.concatenate(outs, axis=1), ref_full) <= TOL_MODULE


def test_config_errors_name_the_field():
  hf = ref_lib.text_config().to_dict()
  with pytest.raises(UnsupportedConfigError, match="layer_types.*'sliding_attention'"):
    from_hf_config({**hf, "layer_types": ["linear_attention", "sliding_attention"] * 2})
  with pytest.raises(UnsupportedConfigError, match="layer_types has 3 entries"):
    from_hf_config({**hf, "layer_types": ["linear_attention"] * 3})
  with pytest.raises(UnsupportedConfigError, match="attn_output_gate=False"):
    from_hf_config({**hf, "attn_output_gate": False})
  with pytest.raises(UnsupportedConfigError, match="linear_num_value_heads=3"):
    from_hf_config({**hf, "linear_num_value_heads": 3})


def _meta_param_count(hf_cfg) -> int:
  with torch.device("meta"):
    return sum(p.numel() for p in transformers.Qwen3_5ForCausalLM(hf_cfg).parameters())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_param_counts_match_transformers(name):
  cfg = registry.preset(name)
  hf_cfg = transformers.Qwen3_5TextConfig(**to_hf(cfg))  # the config.json our export writes
  assert hf_cfg.layer_types == list(cfg.family_config.layer_types)
  hf_count = _meta_param_count(hf_cfg)
  assert count_params(abstract_params(cfg)) == hf_count
  assert count_params(abstract_params(cfg.replace(scan_layers=False))) == hf_count


def test_9b_and_27b_presets_equal_the_public_shapes():
  """HF's Qwen3_5TextConfig defaults are the 9B text model; 27B differs in five fields."""
  assert count_params(abstract_params(registry.preset("qwen3.5-9b"))) == _meta_param_count(
    transformers.Qwen3_5TextConfig()
  )
  big = dict(
    hidden_size=5120,
    intermediate_size=17408,
    num_hidden_layers=64,
    num_attention_heads=24,
    linear_num_value_heads=48,
  )
  assert count_params(abstract_params(registry.preset("qwen3.5-27b"))) == _meta_param_count(
    transformers.Qwen3_5TextConfig(**big)
  )


def _forward(cfg, params, tokens, positions, segments):
  hidden, _ = build_model(cfg).apply({"params": params}, tokens, positions, segments)
  return full_logits(hidden, head_weight(params, cfg))


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_sharded_forward_matches_single_device():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices: run under tests/conftest.py (XLA_FLAGS host device count)")
  cfg = _tiny_cfg()
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  shardings = registry.param_shardings(cfg, mesh)
  params = init_params(cfg, jax.random.key(1), shardings)
  lin = params["model"]["layers"]["layer_0"]["linear_attn"]
  assert lin["in_proj_z"]["kernel"].sharding.spec == P(None, "fsdp", "tensor")
  assert lin["out_proj"]["kernel"].sharding.spec == P(None, "tensor", "fsdp")
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (8, 13)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(13, dtype=jnp.int32), (8, 13))
  segments = jnp.ones((8, 13), jnp.int32).at[3, 9:].set(0).at[5, 6:].set(2)
  batch_sharding = sharding.activation_sharding(mesh, cfg.logical_axis_rules, ("batch", "length"))
  inputs = [jax.device_put(x, batch_sharding) for x in (tokens, positions, segments)]
  with sharding.use_mesh(mesh, cfg.logical_axis_rules):
    sharded = jax.jit(_forward, static_argnums=0)(cfg, params, *inputs)
  single = jax.jit(_forward, static_argnums=0)(
    cfg, jax.device_put(params, jax.devices()[0]), tokens, positions, segments
  )
  np.testing.assert_allclose(np.asarray(sharded), np.asarray(single), atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # dense remat policies: tests/models/test_qwen_model.py (default)
def test_remat_gradients_match_and_bf16_forward_is_close():
  """Training path: remat'ed scanned groups give the same fp32 grads; bf16 compute stays close."""
  cfg = _tiny_cfg()
  params = init_params(cfg, jax.random.key(2))
  _, positions, mask = ref_lib.padded_batch(seed=5, t=11)
  tokens = np.random.default_rng(5).integers(0, cfg.vocab_size, mask.shape).astype(np.int32)

  def loss(c, p):
    return jnp.mean(_forward(c, p, tokens, positions, mask) ** 2)

  plain = jax.jit(jax.grad(lambda p: loss(cfg, p)))(params)
  remat_cfg = cfg.replace(remat_policy="full")
  remat = jax.jit(jax.grad(lambda p: loss(remat_cfg, p)))(params)
  for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(remat), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
  a_log = plain["model"]["layers"]["layer_0"]["linear_attn"]["A_log"]
  assert np.abs(np.asarray(a_log)).max() > 0  # gradients reach the gating params

  bf16 = cfg.with_dtypes(compute_dtype="bfloat16")
  ref = np.asarray(_forward(cfg, params, tokens, positions, mask))
  low = np.asarray(_forward(bf16, params, tokens, positions, mask))
  assert np.isfinite(low).all()
  assert ref_lib.rel_err(low, ref, mask) <= 5e-2
