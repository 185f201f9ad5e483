"""Packed micro-batches (batch.pack_micro_batches + the Trainer's packed path): first-fit decreasing
into bucket shapes, loss and gradients equal to one row per trajectory (dense Qwen and Qwen3.5,
token and sequence aggregation), the padding fraction in the step metrics, one compile per bucket,
rows that split over the batch shards, and the top-K fields from episodes through a topk_tv step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train.conftest import random_trajectories
from tmax_jax.agents.episode import EpisodeResult
from tmax_jax.agents.rollout import Group
from tmax_jax.formats import TokenTrajectory
from tmax_jax.loop import rollout_batch
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.models import registry
from tmax_jax.rl.losses import DPPOHyper
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import step as step_lib
from tmax_jax.train.config import LossConfig, OptimizerConfig, PackingConfig, TrainConfig

TOL = 1e-6


def _cfg(**kw) -> TrainConfig:
  return TrainConfig(
    optimizer=OptimizerConfig(learning_rate=1e-3, total_steps=10), logprob_chunk_size=8, **kw
  )


def _traj(n: int) -> batch_lib.Trajectory:
  return batch_lib.Trajectory(tokens=np.arange(n) % 7, loss_mask=np.ones(n))


def _close(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=TOL, atol=TOL)


def test_first_fit_decreasing_into_buckets():
  trajs = [_traj(n) for n in (7, 30, 3, 12, 10, 5, 9)]
  packed = batch_lib.pack_micro_batches(trajs, [(4, 16), (2, 32)])
  # longest first: 30 opens a [2, 32] micro-batch, 12 + 10 + 9 fill its second row; 7 fits no
  # open row and opens a [4, 16] one (7 + 5 + 3 in its first row), whose 3 empty rows halve to 1
  assert [mb.shape for mb in packed.micro_batches] == [(2, 32), (1, 16)]
  first, second = packed.micro_batches
  np.testing.assert_array_equal(np.bincount(first.segment_ids[1], minlength=4), [1, 12, 10, 9])
  np.testing.assert_array_equal(np.bincount(second.segment_ids[0], minlength=4), [1, 7, 5, 3])
  assert first.segment_ids[0, :30].tolist() == [1] * 30 and first.positions[1, 12] == 0
  assert packed.num_tokens == 76 and packed.padding_fraction == pytest.approx(1 - 76 / 80)
  # shards: rows stay a multiple of them
  packed = batch_lib.pack_micro_batches(trajs, [(4, 16), (2, 32)], shards=2)
  assert [mb.shape for mb in packed.micro_batches] == [(2, 32), (2, 16)]
  with pytest.raises(ValueError, match="trajectory 1: 30 tokens do not fit seq_len=16"):
    batch_lib.pack_micro_batches(trajs, [(4, 16)])


def test_bucket_shapes_split_over_batch_shards():
  cfg = PackingConfig(tokens_per_micro_batch=256, row_lengths=(16, 32, 64))
  assert cfg.buckets(64, shards=4) == [(16, 16), (8, 32), (4, 64)]
  assert PackingConfig(tokens_per_micro_batch=96).buckets(32, shards=2) == [(2, 32)]
  with pytest.raises(ValueError, match="fewer than 8 rows of 64 tokens"):
    cfg.buckets(64, shards=8)
  with pytest.raises(ValueError, match="longest row must hold seq_len=100"):
    cfg.buckets(100)
  with pytest.raises(ValueError, match="expected increasing lengths"):
    PackingConfig(tokens_per_micro_batch=64, row_lengths=(32, 16))
  assert not PackingConfig().enabled


def _uneven_episodes(seed: int, n: int = 32, seq_len: int = 64):
  """Agent-like lengths: three quarters short, the rest between half and all of seq_len."""
  rng = np.random.default_rng(seed)
  lengths = np.where(
    rng.uniform(size=n) < 0.75, rng.integers(6, 20, n), rng.integers(seq_len // 2, seq_len + 1, n)
  )
  out = []
  for length in lengths:
    mask = (np.arange(length) >= 3).astype(np.float32)
    out.append(
      batch_lib.Trajectory(
        tokens=rng.integers(0, 16, length),
        loss_mask=mask,
        behaviour_logp=np.log(rng.uniform(0.02, 0.3, length)),
        advantage=float(rng.normal()),
      )
    )
  return out


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_uneven_rl_batch_padding_fraction_in_metrics(tiny):
  model, mcfg, params = tiny
  trajs = _uneven_episodes(0)
  fixed = step_lib.Trainer(model, mcfg, _cfg())
  packed = step_lib.Trainer(model, mcfg, _cfg(packing=PackingConfig(256, (32, 64))))
  _, mf = fixed.step(
    fixed.init_state(jax.tree.map(jnp.copy, params)),
    fixed.make_batch(trajs, 64, num_rows=32, pack_rows=False),
  )
  state = packed.init_state(jax.tree.map(jnp.copy, params))
  state, mp = packed.step(state, packed.make_batch(trajs, 64))
  assert mf["padding_fraction"] > 0.5 and mf["micro_batches"] == 1
  assert mp["padding_fraction"] < 0.15 and mp["micro_batches"] >= 3
  assert mp["n_tokens"] == mf["n_tokens"] == sum(len(t.tokens) for t in trajs)
  for key in ("loss", "grad_norm", "kept_frac", "tv_mean", "entropy"):
    np.testing.assert_allclose(mp[key], mf[key], rtol=TOL, atol=TOL)
  # another batch with a different number of micro-batches compiles nothing new
  shapes = {mb.shape for mb in packed.make_batch(trajs, 64).micro_batches}
  other = packed.make_batch(_uneven_episodes(1), 64)
  assert len(other.micro_batches) != mp["micro_batches"]
  shapes |= {mb.shape for mb in other.micro_batches}
  _, m2 = packed.step(state, other)
  assert np.isfinite(m2["loss"]) and m2["padding_fraction"] < 0.15
  assert packed._micro._cache_size() == len(shapes) <= 3


@pytest.mark.parametrize(
  "model_name,aggregation",
  [
    ("dense", "token"),
    pytest.param("qwen3_5", "token", marks=pytest.mark.slow),  # dense in the default suite
    # sequence aggregation over micro-batches is also in test_step (fixed batches) by default
    pytest.param("dense", "sequence", marks=pytest.mark.slow),
    pytest.param("qwen3_5", "sequence", marks=pytest.mark.slow),
  ],
)
def test_packed_loss_and_grads_equal_one_row_per_trajectory(request, model_name, aggregation):
  model, mcfg, params = request.getfixturevalue("tiny" if model_name == "dense" else "tiny_qwen3_5")
  trajs = random_trajectories(2, 10, 24)
  cfg = _cfg(loss=LossConfig(aggregation=aggregation))
  packed_trainer = step_lib.Trainer(model, mcfg, cfg.replace(packing=PackingConfig(64, (16, 32))))
  packed = packed_trainer.make_batch(trajs, 32)
  assert len({mb.shape for mb in packed.micro_batches}) == 2  # two buckets in one step
  assert max(int(mb.segment_ids.max()) for mb in packed.micro_batches) >= 2
  lp, sp, gp = packed_trainer.grads(params, packed)
  unpacked = step_lib.Trainer(model, mcfg, cfg)
  lu, su, gu = unpacked.grads(params, unpacked.make_batch(trajs, 24, pack_rows=False))
  np.testing.assert_allclose(lp, lu, rtol=TOL, atol=TOL)
  _close(sp, su)
  _close(gp, gu)
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(gu)) > 1e-3


def _on_policy_episode(model, mcfg, params, k: int, seed: int) -> EpisodeResult:
  """prompt -> 2 generated turns with an observation between, as a rollout builds it; behaviour
  logprobs and top-K come from the model itself at every generated token (on-policy). The server
  here sends K + 2 alternatives, lowest first, so the batch must sort and cut them."""
  rng = np.random.default_rng(seed)
  traj = TokenTrajectory(eos_id=15)
  parts = [("prompt", 4), ("gen", 6), ("obs", 3), ("gen", 5)]
  tokens = rng.integers(0, 15, sum(n for _, n in parts)).astype(np.int32)
  hidden, _ = model.apply(
    {"params": params},
    tokens[None],
    np.arange(len(tokens))[None],
    np.ones((1, len(tokens)), np.int32),
  )
  logp_all = np.asarray(
    jax.nn.log_softmax(
      logprobs_lib.full_logits(hidden, registry.head_weight(params, mcfg)), axis=-1
    )
  )[0]  # [T, V]: predicts token t + 1
  start = 0
  for kind, n in parts:
    ids = tokens[start : start + n]
    if kind == "gen":
      dist = logp_all[start - 1 : start + n - 1]  # [n, V]: the distributions that drew these tokens
      sent = np.argsort(-dist, axis=-1)[:, : k + 2][:, ::-1]  # [n, K + 2], lowest first
      traj.add_generated(
        ids,
        dist[np.arange(n), ids],
        version=0,
        topk_ids=sent.tolist(),
        topk_logprobs=np.take_along_axis(dist, sent, 1).tolist(),
      )
    elif kind == "prompt":
      traj.add_prompt(ids)
    else:
      traj.add_observation(ids)
    start += n
  return EpisodeResult(traj, status="submitted", reward=float(seed % 2))


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_topk_fields_from_episodes_through_a_topk_tv_step(tiny):
  model, mcfg, params = tiny
  k = 4
  groups = [
    Group(
      task=None,
      index=g,
      episodes=[_on_policy_episode(model, mcfg, params, k, 2 * g + i) for i in range(2)],
    )
    for g in range(2)
  ]
  trajs = rollout_batch.to_trajectories(groups)
  assert all(len(t.topk_ids[5]) == k + 2 and t.topk_ids[0] == [] for t in trajs)
  # the batch: highest K first, aligned with the predicted token, zeros off the loss tokens
  one = batch_lib.pack(
    trajs[:1], len(trajs[0].tokens), fields=("topk_ids", "behaviour_topk_logp"), top_k=k
  )
  on = one.loss_mask[0] > 0
  for t in np.flatnonzero(on):
    want = trajs[0].topk_ids[t + 1][::-1][:k]
    assert one.topk_ids[0, t].tolist() == want
    np.testing.assert_allclose(one.behaviour_topk_logp[0, t], trajs[0].topk_logp[t + 1][::-1][:k])
  assert np.all(one.topk_ids[0, ~on] == 0) and np.all(one.behaviour_topk_logp[0, ~on] == 0)
  # a behaviour that put less mass on the sampled tokens (r > 1) and A > 0: a token is dropped
  # exactly when its divergence exceeds delta
  shifted = [
    batch_lib.Trajectory(
      t.tokens,
      t.loss_mask,
      np.asarray(t.behaviour_logp) - 0.7,
      1.0,
      topk_ids=t.topk_ids,
      topk_logp=t.topk_logp,
    )
    for t in trajs
  ]
  kept = {}
  for div in ("topk_tv", "tv"):
    trainer = step_lib.Trainer(
      model,
      mcfg,
      _cfg(
        loss=LossConfig(hypers={"dppo": DPPOHyper(divergence=div, delta=0.01, top_k=k)}),
        packing=PackingConfig(64, (32,)),
      ),
    )
    batch = trainer.make_batch(shifted, 32)
    mb = batch.micro_batches[0]
    assert (mb.topk_ids is None) == (div == "tv")
    if mb.topk_ids is not None:
      assert mb.topk_ids.shape == mb.shape + (k,) and mb.behaviour_topk_logp.dtype == np.float32
    _, m = trainer.step(trainer.init_state(jax.tree.map(jnp.copy, params)), batch)
    assert np.isfinite(m["loss"])
    kept[div] = m["kept_frac"]
  # on-policy top-K: the current top-K logprobs equal the behaviour's, nothing is dropped; the
  # binary TV of the shifted sampled-token logprob drops some tokens
  assert kept["topk_tv"] == 1.0 and kept["tv"] < 1.0
