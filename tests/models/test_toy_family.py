"""Adding a model family is one new module plus one `register(...)` call (issue 17 acceptance).

tests/models/toy_family.py registers a family the library has never heard of; this test runs it
through everything the library does with a model, touching no other module: load an HF directory
(hf_io), one train step (train/step.Trainer), serving over the real JetStream gRPC server (greedy
tokens equal an uncached forward's argmax), and export (hf_io.save_pretrained, reloaded exactly).
"""

import asyncio
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from tests.models import toy_family
from tests.train.conftest import random_trajectories
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.inference import server as server_lib
from tmax_jax.models import decoder, full_logits, head_weight, hf_io, registry
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import step as step_lib
from tmax_jax.train.config import OptimizerConfig, TrainConfig

T = toy_family.TINY
D, F, N, K, H, V = (
  T["hidden_size"],
  T["intermediate_size"],
  T["num_attention_heads"],
  T["num_key_value_heads"],
  T["head_dim"],
  T["vocab_size"],
)


def _hf_tensors(seed: int = 0) -> dict[str, np.ndarray]:
  """Random weights in Hugging Face's layout ([out, in] linears), as an HF checkpoint has them."""
  rng = np.random.default_rng(seed)
  shapes = {
    "model.embed_tokens.weight": (V, D),
    "model.norm.weight": (D,),
    "lm_head.weight": (V, D),
  }
  for i in range(T["num_hidden_layers"]):
    p = f"model.layers.{i}."
    shapes |= {
      p + "self_attn.q_proj.weight": (N * H, D),
      p + "self_attn.k_proj.weight": (K * H, D),
      p + "self_attn.v_proj.weight": (K * H, D),
      p + "self_attn.o_proj.weight": (D, N * H),
      p + "mlp.gate_proj.weight": (F, D),
      p + "mlp.up_proj.weight": (F, D),
      p + "mlp.down_proj.weight": (D, F),
      p + "input_layernorm.weight": (D,),
      p + "post_attention_layernorm.weight": (D,),
    }
  return {
    k: (0.3 * rng.standard_normal(s) + (1.0 if len(s) == 1 else 0.0)).astype(np.float32)
    for k, s in shapes.items()
  }


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("toy_hf")
  config = {k: v for k, v in T.items() if k != "qk_norm"}
  (out / "config.json").write_text(json.dumps(dict(config, architectures=["ToyForCausalLM"])))
  tensors = _hf_tensors()
  save_file(tensors, str(out / "model.safetensors"))
  return out, tensors


def test_registered_by_one_call_with_the_contract_checked():
  family = registry.family_for(toy_family.MODEL_TYPE)
  assert family.name == "toy" and family.model_class is toy_family.ToyForCausalLM
  assert registry.preset("toy-tiny").model_type == toy_family.MODEL_TYPE
  assert decoder.missing_contract(toy_family.ToyForCausalLM) == []


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_load_train_serve_export(hf_dir, tmp_path):
  src, tensors = hf_dir
  cfg, params = hf_io.load_pretrained(src)
  assert cfg.model_type == toy_family.MODEL_TYPE and not cfg.qk_norm
  q = np.asarray(params["model"]["layers"]["self_attn"]["q_proj"]["kernel"][1])  # [D,N,H]
  np.testing.assert_array_equal(
    q, tensors["model.layers.1.self_attn.q_proj.weight"].T.reshape(D, N, H)
  )

  # train: one optimizer step on packed random trajectories moves the weights, loss finite
  trainer = step_lib.Trainer(
    registry.build_model(cfg),
    cfg,
    TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-2, total_steps=2), logprob_chunk_size=8),
  )
  state = trainer.init_state(jax.tree.map(jnp.array, params))
  state, metrics = trainer.step(state, batch_lib.pack(random_trajectories(0, 4, 12), 24))
  assert np.isfinite(float(metrics["loss"]))
  trained = jax.tree.map(np.asarray, state.params)
  assert not np.array_equal(trained["model"]["norm"]["scale"], tensors["model.norm.weight"])

  # serve: greedy tokens over gRPC equal the argmax of uncached full forwards
  prompt, new = [3, 17, 42, 5, 9], 4
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(max_concurrent_decodes=2, max_len=64, max_prefill_length=32),
    lambda: trained,
  )
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  try:

    async def generate():
      async with client_lib.RolloutClient(
        server.address, client_lib.ClientConfig(timeout_s=120)
      ) as c:
        return await c.generate(prompt, new, sampling.SamplingParams(temperature=0.0))

    served = asyncio.run(generate())
  finally:
    server.stop()
  model, seq = registry.build_model(cfg), list(prompt)
  for _ in range(new):
    ids = jnp.asarray([seq], jnp.int32)
    hidden, _ = model.apply(
      {"params": trained}, ids, jnp.arange(len(seq))[None], jnp.ones_like(ids)
    )
    logits = full_logits(hidden, head_weight(trained, cfg), cfg.dtypes.head)
    seq.append(int(jnp.argmax(logits[0, -1])))
  assert served.token_ids == seq[len(prompt) :]

  # export: an HF directory of the family's own config that loads back to the same params
  out = hf_io.save_pretrained(tmp_path / "export", trained, cfg)
  assert json.loads((out / "config.json").read_text())["model_type"] == toy_family.MODEL_TYPE
  cfg2, params2 = hf_io.load_pretrained(out)
  assert cfg2 == cfg
  for a, b in zip(jax.tree.leaves(trained), jax.tree.leaves(params2), strict=True):
    np.testing.assert_array_equal(a, np.asarray(b))
