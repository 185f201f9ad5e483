"""HF checkpoint I/O: sharded index, `model.language_model.` keys, sharded loading, clear errors,
atomic export, tokenizer files, config parsing."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
import qwen_ref
import transformers

from tmax_jax import sharding
from tmax_jax.models import UnsupportedConfigError, from_hf_config, hf_io
from tmax_jax.models.hf_io import CheckpointError, KeyRule


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp("ckpt") / "qwen3"
  qwen_ref.torch_model(qwen_ref.hf_config("qwen3_untied")).save_pretrained(path)
  return path


def assert_trees_equal(a, b):
  for (path, x), y in zip(
    jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b), strict=True
  ):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str(path))


def test_key_rule_round_trips():
  rng = np.random.default_rng(0)
  for rule, shape, hf_shape in [
    (KeyRule("q", "q", in_axes=1), (8, 4, 3), (12, 8)),
    (KeyRule("o", "o", in_axes=2), (4, 3, 8), (8, 12)),
    (KeyRule("b", "b"), (4, 3), (12,)),
    (KeyRule("e", "e", hf_ndim=2), (10, 8), (10, 8)),
  ]:
    x = rng.normal(size=shape)
    assert rule.hf_shape(shape) == hf_shape
    hf = rule.to_hf(x)
    assert hf.shape == hf_shape
    np.testing.assert_array_equal(rule.to_param(hf, shape), x)


def test_sharded_index_and_reload(hf_dir, tmp_path):
  cfg, params = hf_io.load_pretrained(hf_dir)
  out = hf_io.save_pretrained(tmp_path / "multi", params, cfg, max_shard_bytes=20_000)
  index = json.loads((out / hf_io.SAFETENSORS_INDEX).read_text())
  assert len(set(index["weight_map"].values())) > 3
  _, again = hf_io.load_pretrained(out)
  assert_trees_equal(params, again)
  ref = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
  multi = transformers.AutoModelForCausalLM.from_pretrained(out)
  for name, p in ref.state_dict().items():
    np.testing.assert_array_equal(multi.state_dict()[name].numpy(), p.numpy(), err_msg=name)


def test_language_model_prefix_and_nested_config(hf_dir, tmp_path):
  refs = hf_io.index_checkpoint(hf_dir)
  tensors = {
    k.replace("model.", "model.language_model.", 1): np.array(hf_io._read(r))
    for k, r in refs.items()
  }
  tensors["model.visual.patch_embed.weight"] = np.zeros((2, 2), np.float32)  # ignored
  out = tmp_path / "vlm"
  out.mkdir()
  hf_io.write_safetensors(out / "model.safetensors", tensors)
  text = json.loads((hf_dir / "config.json").read_text())
  (out / "config.json").write_text(json.dumps({"model_type": "vlm_wrapper", "text_config": text}))
  cfg, params = hf_io.load_pretrained(out)
  _, ref = hf_io.load_pretrained(hf_dir)
  assert cfg.model_type == "qwen3"
  assert_trees_equal(ref, params)


def test_load_into_target_shardings(hf_dir):
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  mesh = sharding.make_mesh(fsdp=4, tensor=2)
  cfg, params = hf_io.load_pretrained(hf_dir, mesh=mesh)
  _, host = hf_io.load_pretrained(hf_dir)
  q = params["model"]["layers"]["self_attn"]["q_proj"]["kernel"]  # [L,D,N,H] = [2,64,4,16]
  assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
  assert {s.data.shape for s in q.addressable_shards} == {(2, 16, 2, 16)}
  assert_trees_equal(host, params)


def _rewrite(src, dst, edit):
  dst.mkdir()
  for f in src.iterdir():
    if f.name != "model.safetensors":
      (dst / f.name).write_bytes(f.read_bytes())
  tensors = {k: np.array(hf_io._read(r)) for k, r in hf_io.index_checkpoint(src).items()}
  edit(tensors)
  hf_io.write_safetensors(dst / "model.safetensors", tensors)


def test_missing_tensor_names_key_and_shape(hf_dir, tmp_path):
  _rewrite(hf_dir, tmp_path / "bad", lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
  with pytest.raises(
    CheckpointError,
    match=r"missing tensor model\.layers\.1\.self_attn\.k_proj\.weight "
    r"\(expected shape \[32, 64\]\)",
  ):
    hf_io.load_pretrained(tmp_path / "bad")


def test_misshaped_tensor_names_key_and_shape(hf_dir, tmp_path):
  def edit(t):
    t["model.layers.0.mlp.down_proj.weight"] = t["model.layers.0.mlp.down_proj.weight"][:, :100]

  _rewrite(hf_dir, tmp_path / "bad", edit)
  with pytest.raises(
    CheckpointError,
    match=r"model\.layers\.0\.mlp\.down_proj\.weight has shape "
    r"\[64, 100\], expected \[64, 112\]",
  ):
    hf_io.load_pretrained(tmp_path / "bad")


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("hidden_act", "gelu", r"hidden_act='gelu'; supported: \['silu'\]"),
    (
      "rope_parameters",
      {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0},
      r"rope_parameters\.rope_type='dynamic'; supported: \['default', 'linear', 'yarn'\]",
    ),
    ("rope_scaling", {"type": "longrope", "factor": 2.0}, r"rope_scaling\.rope_type='longrope'"),
    ("use_sliding_window", True, r"use_sliding_window=True; supported: \[False\]"),
    (
      "layer_types",
      ["full_attention", "sliding_attention"],
      r"layer_types \['sliding_attention'\]",
    ),
    ("model_type", "llama", r"model_type='llama'; supported: \["),
  ],
)
def test_unsupported_config_values(hf_dir, field, value, message):
  hf = json.loads((hf_dir / "config.json").read_text())
  hf.pop("rope_parameters", None) if field == "rope_scaling" else None
  hf[field] = value
  with pytest.raises(UnsupportedConfigError, match=message):
    from_hf_config(hf)


def test_legacy_rope_fields():
  hf = {
    **qwen_ref.TINY,
    "model_type": "qwen2",
    "rope_theta": 5e5,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
  }
  cfg = from_hf_config(hf)
  assert cfg.rope_theta == 5e5 and cfg.attention_bias and not cfg.qk_norm
  assert (
    cfg.rope_scaling.rope_type == "yarn"
    and cfg.rope_scaling.original_max_position_embeddings == 256
  )


def test_failed_export_leaves_nothing(hf_dir, tmp_path):
  cfg, params = hf_io.load_pretrained(hf_dir)
  missing = jax.tree.map(lambda x: x, params)
  del missing["model"]["layers"]["mlp"]["down_proj"]
  with pytest.raises(CheckpointError, match="params lack model/layers/mlp/down_proj/kernel"):
    hf_io.save_pretrained(tmp_path / "out", missing, cfg)
  # A mis-shaped leaf is caught before any file is written.
  params["model"]["layers"]["post_attention_layernorm"]["scale"] = np.zeros((2, 3), np.float32)
  with pytest.raises(
    CheckpointError,
    match=r"post_attention_layernorm/scale has shape \[2, 3\], "
    r"expected \[2, 64\]",
  ):
    hf_io.save_pretrained(tmp_path / "out", params, cfg, max_shard_bytes=20_000)
  assert list(tmp_path.iterdir()) == []


def test_killed_export_leaves_no_loadable_output(hf_dir, tmp_path):
  """SIGKILL the exporting process right after its second weight file: the target never exists."""
  script = textwrap.dedent(f"""
    import os, signal
    from tmax_jax.models import hf_io
    written = []
    original = hf_io.write_safetensors
    def write_then_die(path, tensors, metadata=None):
      original(path, tensors, metadata)
      written.append(path)
      if len(written) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    hf_io.write_safetensors = write_then_die
    cfg, params = hf_io.load_pretrained({str(hf_dir)!r})
    hf_io.save_pretrained({str(tmp_path / "out")!r}, params, cfg, max_shard_bytes=20_000)
  """)
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == -9, proc.stderr[-2000:]
  assert not (tmp_path / "out").exists()
  leftovers = list(tmp_path.iterdir())
  assert len(leftovers) == 1 and leftovers[0].name.startswith(".out.tmp-")
  assert not (leftovers[0] / "config.json").exists()
  with pytest.raises(OSError):
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")


def test_export_with_tokenizer_and_overwrite(hf_dir, tmp_path):
  tokenizers = pytest.importorskip("tokenizers")
  vocab = {f"t{i}": i for i in range(256)}
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t0"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="t1")
  fast.save_pretrained(tmp_path / "tok")
  cfg, params = hf_io.load_pretrained(hf_dir)
  out = tmp_path / "out"
  hf_io.save_pretrained(out, params, cfg, tokenizer_dir=tmp_path / "tok")
  assert transformers.AutoTokenizer.from_pretrained(out)("t5 t7")["input_ids"] == [5, 7]
  gen = json.loads((out / "generation_config.json").read_text())
  assert gen == {
    k: v
    for k, v in (
      ("bos_token_id", cfg.bos_token_id),
      ("eos_token_id", cfg.eos_token_id),
      ("pad_token_id", cfg.pad_token_id),
    )
    if v is not None
  }
  with pytest.raises(FileExistsError):
    hf_io.save_pretrained(out, params, cfg)
  hf_io.save_pretrained(out, params, cfg, overwrite=True)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tok"]
  assert not (out / "tokenizer.json").exists()


def test_bf16_export_loads_in_transformers_and_back(hf_dir, tmp_path):
  cfg, params = hf_io.load_pretrained(hf_dir)
  out = hf_io.save_pretrained(tmp_path / "bf16", params, cfg, dtype="bfloat16")
  assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
  ref = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
  half = transformers.AutoModelForCausalLM.from_pretrained(out)
  w = "model.layers.0.self_attn.q_proj.weight"
  assert str(half.state_dict()[w].dtype) == "torch.bfloat16"
  np.testing.assert_array_equal(
    half.state_dict()[w].float().numpy(), ref.state_dict()[w].bfloat16().float().numpy()
  )
  cfg16, back = hf_io.load_pretrained(out)  # bf16 on disk -> fp32 params by default
  q = back["model"]["layers"]["self_attn"]["q_proj"]["kernel"]
  assert q.dtype == np.float32
  np.testing.assert_allclose(
    q, params["model"]["layers"]["self_attn"]["q_proj"]["kernel"], rtol=1e-2, atol=1e-3
  )


@pytest.mark.parametrize(
  "rule, shape",
  [
    (KeyRule("q", "q", in_axes=1), (8, 4, 3)),
    (KeyRule("o", "o", in_axes=2), (4, 3, 8)),
    (KeyRule("b", "b"), (4, 3)),
    (KeyRule("e", "e", hf_ndim=2), (10, 8)),
  ],
)
def test_block_reads_equal_full_conversion(rule, shape, tmp_path):
  """Each device reads only its block; every block (contiguous in HF layout or not) is right."""
  x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
  hf_io.write_safetensors(tmp_path / "t.safetensors", {"t": rule.to_hf(x)})
  ref = hf_io.index_checkpoint(tmp_path)["t"]
  blocks = [
    tuple(slice(0, n) for n in shape),
    (slice(2, 4),) + tuple(slice(None) for _ in shape[1:]),
    tuple(slice(None) for _ in shape[:-1]) + (slice(1, 3),),
    (slice(1, 3), slice(0, 2)) + tuple(slice(None) for _ in shape[2:]),
  ]
  for index in blocks:
    np.testing.assert_array_equal(hf_io._read_shard(rule, ref, shape, index), x[index], str(index))
