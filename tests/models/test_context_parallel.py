"""Context parallelism over the `sequence` mesh axis (fake CPU devices): ring attention, the Gated
DeltaNet state passed across shards, whole models (logits and gradients equal the unsharded model,
fp32 1e-5), train steps with sequence = 2 and sequence = every device equal to sequence = 1, and
T/S activations per device."""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax import sharding
from tmax_jax.models import build_model, gated_delta, head_weight, init_params, registry
from tmax_jax.models.attention import ring
from tmax_jax.models.logprobs import full_logits
from tmax_jax.train.config import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import attention_parity  # noqa: E402  (bench/: packed-row inputs, kernel comparison)
import long_context  # noqa: E402  (bench/: the small models, compiled train-step memory)
from test_attention import DENSE, QWEN3_5, assert_trees_close, packed_tokens  # noqa: E402

TOL = 1e-5


def seq_mesh(n: int):
  return sharding.make_mesh(data=1, fsdp=1, sequence=n, devices=jax.devices()[:n])


def test_ring_attention_equals_blockwise():
  """4 shards; packed segments crossing shard boundaries, a padded tail, GQA; values and grads."""
  case = attention_parity.packed_inputs(2, 64, 4, 2, 8, jnp.float32)
  pos, seg = case[3], case[4]
  with sharding.use_mesh(seq_mesh(4), ()):
    errs = attention_parity.compare(
      lambda q, k, v: ring.attention(q, k, v, pos, seg, block_q=8, block_k=8), case, TOL, rel=False
    )
  assert errs["ok"], errs


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_gated_delta_rule_passes_state_across_shards():
  rng = np.random.default_rng(0)
  b, t, kh, n, h = 2, 64, 2, 4, 8
  q, k = (jnp.asarray(rng.normal(size=(b, t, kh, h)), jnp.float32) for _ in range(2))
  v = jnp.asarray(rng.normal(size=(b, t, n, h)), jnp.float32)
  g = -jnp.asarray(rng.uniform(0.01, 0.5, (b, t, n)), jnp.float32)
  beta = jnp.asarray(rng.uniform(size=(b, t, n)), jnp.float32)
  reset = jnp.zeros((b, t), bool).at[0, 21].set(True).at[1, 32].set(True)  # one at a boundary
  init = jnp.asarray(rng.normal(size=(b, n, h, h)), jnp.float32)
  w = jnp.asarray(rng.normal(size=v.shape), jnp.float32)

  def f(q, k, v, g, beta):
    return gated_delta.chunk_gated_delta_rule(
      q, k, v, g, beta, chunk_size=8, reset=reset, initial_state=init
    )

  def loss(*xs):
    out, state = f(*xs)
    return jnp.sum(out * w) + jnp.sum(jnp.sin(state))

  args = (q, k, v, g, beta)
  want = f(*args), jax.grad(loss, range(5))(*args)
  with sharding.use_mesh(seq_mesh(4), ()):
    got = jax.jit(f)(*args), jax.jit(jax.grad(loss, range(5)))(*args)
  assert_trees_close(got, want, TOL)


def logits_and_grads(cfg, params, tokens, pos, seg, mesh=None):
  """Full fp32 logits [B,T,V] and the gradient of the live-token log-likelihood."""
  model = build_model(cfg)

  def loss(p):
    hidden, _ = model.apply({"params": p}, tokens, pos, seg)
    logits = full_logits(hidden, head_weight(p, cfg))
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1)[..., 0]
    return jnp.sum(jnp.where(seg > 0, logp, 0.0)), logits

  fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
  if mesh is None:
    (_, logits), grads = fn(params)
  else:
    with sharding.use_mesh(mesh, cfg.logical_axis_rules):
      (_, logits), grads = fn(params)
  return np.where(np.asarray(seg > 0)[..., None], logits, 0.0), grads


def check_model(cfg, t: int, shards: int):
  params = init_params(cfg, jax.random.key(0))
  batch = packed_tokens(t)
  want = logits_and_grads(cfg, params, *batch)
  got = logits_and_grads(cfg, params, *batch, mesh=seq_mesh(shards))
  assert_trees_close(got, want, TOL)


@pytest.mark.slow
def test_qwen3_5_sequence_parallel_small():
  """Ring attention, DeltaNet state passing and the conv halo in one model (T = 256, 4 shards)."""
  check_model(QWEN3_5, 256, 4)


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.parametrize("cfg", [DENSE, QWEN3_5], ids=["dense", "qwen3_5"])
def test_model_sequence_4_equals_unsharded_at_4096(cfg):
  """Acceptance: sequence = 4 on 4 fake devices, T = 4096, logits and grads to 1e-5."""
  check_model(cfg.replace(attention_q_chunk=128, attention_kv_chunk=128), 4096, 4)


def train_step(cfg, mesh, batch):
  from tmax_jax.train import step as step_lib

  trainer = step_lib.Trainer(build_model(cfg), cfg, TrainConfig(logprob_chunk_size=32), mesh)
  params = init_params(cfg, jax.random.key(0), registry.param_shardings(cfg, mesh))
  state = trainer.init_state(params)
  state, metrics = trainer.step(state, batch)
  return jax.device_get(state.params), metrics


@pytest.mark.parametrize(
  "cfg", [DENSE, pytest.param(QWEN3_5, marks=pytest.mark.slow)], ids=["dense", "qwen3_5"]
)
@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_train_step_sequence_2_equals_sequence_1(cfg):
  """The whole DPPO step (ring attention; for Qwen3.5 also DeltaNet state passing and the conv
  halo; the per-shard head) on packed rows of uneven trajectories: same metrics and params."""
  batch = long_context.random_rows(cfg, 2, 96)
  params_1, metrics_1 = train_step(cfg, seq_mesh(1), batch)
  params_2, metrics_2 = train_step(cfg, seq_mesh(2), batch)
  for key in ("loss", "grad_norm", "kept_frac", "entropy", "n_tokens"):
    np.testing.assert_allclose(metrics_2[key], metrics_1[key], rtol=TOL, err_msg=key)
  assert_trees_close(params_2, params_1, TOL)


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(1800, method="thread")  # a deadlock fails the run instead of hanging CI
def test_qwen3_5_train_step_sequence_spanning_every_device():
  """The 9B / TerminalHorizon mesh shape: sequence = all 8 devices, chunk 64, packed rows. It
  deadlocked on XLA:CPU while the UT solve was jaxlib's LAPACK trsm
  (docs/design/long-context.md); now it finishes and equals sequence = 1."""
  cfg = long_context.small_models(tiny=True)["qwen3_5"].replace(attention_impl="blockwise")
  assert cfg.family_config.chunk_size == 64  # per-shard solves big enough to be split by LAPACK
  batch = long_context.random_rows(cfg, 2, 128)
  every = sharding.make_mesh(data=1, fsdp=1, sequence=jax.device_count())
  params_1, metrics_1 = train_step(cfg, seq_mesh(1), batch)
  params_8, metrics_8 = train_step(cfg, every, batch)
  for key in ("loss", "grad_norm", "kept_frac", "entropy", "n_tokens"):
    np.testing.assert_allclose(metrics_8[key], metrics_1[key], rtol=TOL, err_msg=key)
  assert_trees_close(params_8, params_1, TOL)


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["dense", "qwen3_5"])
def test_train_step_memory_per_device_falls_with_shards(name):
  """A row of length T on S devices holds ~T/S tokens of activations per device: the compiled
  per-device temp memory of the train step at sequence = 4 is about a quarter of sequence = 1."""
  cfg = long_context.small_models(tiny=True)[name].replace(
    attention_impl="blockwise", attention_q_chunk=64, attention_kv_chunk=64
  )
  one, four = (long_context.temp_bytes(cfg, 2048, mesh=seq_mesh(n)) for n in (1, 4))
  assert four <= 0.3 * one, (one, four)
