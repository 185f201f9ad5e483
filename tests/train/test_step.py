"""The train step: exact accumulation, packing invariance, loss vs a direct NumPy computation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train.conftest import random_trajectories
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.models import registry
from tmax_jax.rl.losses import DPPOHyper
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import step as step_lib
from tmax_jax.train.config import LossConfig, OptimizerConfig, TrainConfig
from tmax_jax.train.topk import topk_logprobs


def _cfg(**kw):
  return TrainConfig(
    optimizer=OptimizerConfig(learning_rate=1e-2, total_steps=10), logprob_chunk_size=8, **kw
  )


def _one_step(tiny, cfg, batch, steps=1):
  model, mcfg, params = tiny
  trainer = step_lib.Trainer(model, mcfg, cfg)
  state = trainer.init_state(jax.tree.map(jnp.array, params))  # copy: the step donates
  rows = []
  for _ in range(steps):
    state, metrics = trainer.step(state, batch)
    rows.append(metrics)
  return state, rows


def _close(a, b, tol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


@pytest.mark.parametrize(
  "loss",
  [
    LossConfig(),
    LossConfig(policy_loss="grpo", aggregation="sequence"),
    pytest.param(
      LossConfig(hypers={"dppo": DPPOHyper(divergence="kl")}, kl_beta=0.1), marks=pytest.mark.slow
    ),
  ],
)
def test_four_micro_batches_equal_one_batch(tiny, loss):
  model, mcfg, params = tiny
  batch = batch_lib.pack(random_trajectories(0, 12, 12), 24, num_rows=8, fields=("ref_logp",))
  dev = jax.tree.map(jnp.asarray, batch)
  out = {}
  for m in (1, 4):
    grad_fn = jax.jit(step_lib.make_grad_fn(model, mcfg, _cfg(loss=loss, micro_batches=m)))
    out[m] = grad_fn(params, dev)
  np.testing.assert_allclose(out[4][0], out[1][0], rtol=1e-6, atol=1e-6)  # loss
  _close(out[4][1], out[1][1], 1e-6)  # stats sums
  _close(out[4][2], out[1][2], 1e-6)  # gradients
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(out[1][2])) > 1e-3
  if loss != LossConfig():
    return
  # and through the whole step (optimizer included); lr 1e-4 keeps Adam's sign-like first
  # update from amplifying 1e-7 gradient noise on near-zero gradients
  opt = OptimizerConfig(learning_rate=1e-4, total_steps=10)
  one, m1 = _one_step(tiny, _cfg(loss=loss, micro_batches=1).replace(optimizer=opt), batch, 2)
  four, m4 = _one_step(tiny, _cfg(loss=loss, micro_batches=4).replace(optimizer=opt), batch, 2)
  for key in ("loss", "grad_norm", "kept_frac", "tv_mean", "kl_mean", "entropy"):
    np.testing.assert_allclose(m4[-1][key], m1[-1][key], rtol=1e-6, atol=1e-6)
  _close(four.params, one.params, 1e-6)


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_packed_rows_equal_unpacked_rows(tiny, aggregation):
  trajs = random_trajectories(1, 8, 12)
  packed = batch_lib.pack(trajs, 32)
  unpacked = batch_lib.pack(trajs, 12, pack_rows=False)
  assert packed.tokens.shape[0] < unpacked.tokens.shape[0]
  assert packed.segment_ids.max() >= 2  # rows really hold several trajectories
  model, mcfg, params = tiny
  grad_fn = jax.jit(
    step_lib.make_grad_fn(model, mcfg, _cfg(loss=LossConfig(aggregation=aggregation)))
  )
  lp, sp, gp = grad_fn(params, jax.tree.map(jnp.asarray, packed))
  lu, su, gu = grad_fn(params, jax.tree.map(jnp.asarray, unpacked))
  np.testing.assert_allclose(lp, lu, rtol=1e-5, atol=1e-6)
  _close(sp, su, 1e-5)
  _close(gp, gu, 1e-5)


def _numpy_logp(tiny, trajs):
  """Per trajectory: (log pi of each next token by a direct fp64 computation, its behaviour
  logp, the loss mask) over tokens 1..n-1."""
  model, mcfg, params = tiny
  unpacked = batch_lib.pack(trajs, max(len(t.tokens) for t in trajs), pack_rows=False)
  hidden, _ = jax.jit(model.apply)(
    {"params": params},
    jnp.asarray(unpacked.tokens),
    jnp.asarray(unpacked.positions),
    jnp.asarray(unpacked.segment_ids),
  )
  all_logits = np.asarray(
    logprobs_lib.full_logits(hidden, registry.head_weight(params, mcfg)), np.float64
  )
  out = []
  for i, tr in enumerate(trajs):
    logits = all_logits[i]
    logp_all = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    logp = logp_all[np.arange(len(tr.tokens) - 1), np.asarray(tr.tokens)[1:]]
    out.append((logp, np.asarray(tr.behaviour_logp)[1:], np.asarray(tr.loss_mask)[1:] > 0))
  return out


def test_loss_matches_direct_numpy_dppo(tiny):
  """metrics["loss"] equals the recipe's token-level DPPO loss computed per trajectory by hand,
  and the mismatch metrics the mean |log pi - log mu| and k3 KL(mu || pi) over loss tokens."""
  trajs = random_trajectories(2, 6, 10)
  batch = batch_lib.pack(trajs, 20)
  _, rows = _one_step(tiny, _cfg(), batch)
  total, count, abs_d, k3 = 0.0, 0.0, 0.0, 0.0
  for tr, (logp, blp, mask) in zip(trajs, _numpy_logp(tiny, trajs), strict=True):
    r = np.exp(logp - blp)
    a = tr.advantage
    drop = (np.abs(np.exp(logp) - np.exp(blp)) > 0.1) & (((a > 0) & (r > 1)) | ((a < 0) & (r < 1)))
    total += np.sum(np.where(mask & ~drop, -a * r, 0.0))
    count += mask.sum()
    abs_d += np.sum(np.abs(logp - blp)[mask])
    k3 += np.sum((r - 1 - np.log(r))[mask])
  np.testing.assert_allclose(rows[0]["loss"], total / count, rtol=1e-5)
  np.testing.assert_allclose(rows[0]["mismatch_abs_logp"], abs_d / count, rtol=1e-5)
  np.testing.assert_allclose(rows[0]["mismatch_kl_k3"], k3 / count, rtol=1e-4)
  assert rows[0]["mismatch_kl_k3"] > 0.01  # random behaviour logprobs: far from the policy


def test_mismatch_is_zero_when_behaviour_is_the_policy(tiny):
  """Behaviour logprobs equal to the trainer's own: both mismatch metrics vanish; SFT (no
  behaviour logprobs) logs none."""
  trajs = random_trajectories(4, 4, 10)
  for tr, (logp, _, _) in zip(trajs, _numpy_logp(tiny, trajs), strict=True):
    tr.behaviour_logp[1:] = logp
  _, rows = _one_step(tiny, _cfg(), batch_lib.pack(trajs, 20))
  assert rows[0]["mismatch_abs_logp"] < 1e-5 and abs(rows[0]["mismatch_kl_k3"]) < 1e-9
  _, sft = _one_step(tiny, _cfg(loss=LossConfig(policy_loss="sft")), batch_lib.pack(trajs, 20))
  assert "mismatch_kl_k3" not in sft[0] and "mismatch_abs_logp" not in sft[0]


def test_sft_step_is_token_mean_cross_entropy(tiny):
  model, mcfg, params = tiny
  trajs = random_trajectories(3, 4, 10)
  batch = batch_lib.pack(trajs, 10, pack_rows=False)
  loss, stats, _ = jax.jit(
    step_lib.make_grad_fn(model, mcfg, _cfg(loss=LossConfig(policy_loss="sft")))
  )(params, jax.tree.map(jnp.asarray, batch))
  hidden, _ = jax.jit(model.apply)(
    {"params": params},
    jnp.asarray(batch.tokens),
    jnp.asarray(batch.positions),
    jnp.asarray(batch.segment_ids),
  )
  logp, _ = logprobs_lib.token_logprobs(
    hidden, registry.head_weight(params, mcfg), jnp.asarray(batch.targets), chunk_size=4
  )
  m = batch.loss_mask
  np.testing.assert_allclose(loss, -np.sum(np.asarray(logp) * m) / m.sum(), rtol=1e-5)
  assert float(stats["kept"]) == m.sum()


def test_topk_logprobs_and_topk_step(tiny):
  model, mcfg, params = tiny
  rng = np.random.default_rng(4)
  hidden = jnp.asarray(rng.normal(size=(2, 7, mcfg.hidden_size)), jnp.float32)
  ids = jnp.asarray(rng.integers(0, mcfg.vocab_size, (2, 7, 3)), jnp.int32)
  w = registry.head_weight(params, mcfg)
  got = topk_logprobs(hidden, w, ids, chunk_size=3)
  full = jax.nn.log_softmax(logprobs_lib.full_logits(hidden, w), axis=-1)
  np.testing.assert_allclose(got, jnp.take_along_axis(full, ids, -1), rtol=1e-5, atol=1e-6)
  batch = batch_lib.pack(random_trajectories(5, 4, 10), 20)
  k = 4
  topk = dataclasses.replace(
    batch,
    topk_ids=rng.integers(0, mcfg.vocab_size, batch.shape + (k,)).astype(np.int32),
    behaviour_topk_logp=np.log(rng.dirichlet(np.ones(k + 1), batch.shape)[..., :k]).astype(
      np.float32
    ),
  )
  _, rows = _one_step(
    tiny, _cfg(loss=LossConfig(hypers={"dppo": DPPOHyper(divergence="topk_tv", top_k=k)})), topk
  )
  assert np.isfinite(rows[0]["loss"]) and 0.0 <= rows[0]["kept_frac"] <= 1.0


def test_flops_per_token_counts_dense_and_attention():
  from tmax_jax.models.qwen import presets

  cfg = presets.qwen3("1.7b")
  f = step_lib.flops_per_token(cfg, 4096)
  # ~6 x 1.7e9 non-embedding+head params plus attention: between 1.0e10 and 1.6e10
  assert 1.0e10 < f < 1.6e10
  assert step_lib.flops_per_token(cfg, 8192) > f
