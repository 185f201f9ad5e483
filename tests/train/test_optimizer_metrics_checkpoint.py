"""Optimizer schedules/clipping, the metrics writer, and Orbax checkpoints on a generic pytree."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.train import checkpoint as ckpt_lib
from tmax_jax.train import config as config_lib
from tmax_jax.train import optimizer as opt_lib
from tmax_jax.train import state as state_lib
from tmax_jax.train.metrics import MetricsWriter, read_jsonl


def _lr(cfg, step):
  return float(opt_lib.make_schedule(cfg)(step))


def test_schedules_follow_their_formulas():
  base = dict(learning_rate=2.0, total_steps=110, warmup_steps=10, end_lr_ratio=0.1)
  const = config_lib.OptimizerConfig(schedule="constant", **base)
  lin = config_lib.OptimizerConfig(schedule="linear", **base)
  cos = config_lib.OptimizerConfig(schedule="cosine", **base)
  for cfg in (const, lin, cos):
    assert _lr(cfg, 0) == 0.0
    assert math.isclose(_lr(cfg, 5), 1.0, rel_tol=1e-6)  # half-way through warmup
    assert math.isclose(_lr(cfg, 10), 2.0, rel_tol=1e-6)
  assert math.isclose(_lr(const, 110), 2.0, rel_tol=1e-6)
  assert math.isclose(_lr(lin, 60), 2.0 * (0.1 + 0.9 * 0.5), rel_tol=1e-6)
  assert math.isclose(_lr(lin, 110), 0.2, rel_tol=1e-6)
  assert math.isclose(_lr(cos, 60), 2.0 * (0.1 + 0.9 * 0.5), rel_tol=1e-6)
  assert math.isclose(
    _lr(cos, 35), 2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4))), rel_tol=1e-6
  )
  assert math.isclose(_lr(cos, 500), 0.2, rel_tol=1e-6)


def test_recipe_presets():
  from tmax_jax import recipes

  rl = recipes.rl("qwen3.5-9b").train
  assert (rl.optimizer.learning_rate, rl.optimizer.schedule, rl.optimizer.max_grad_norm) == (
    1e-6,
    "constant",
    1.0,
  )
  assert (rl.loss.policy_loss, rl.loss.hyper.divergence, rl.loss.kl_beta) == ("dppo", "tv", 0.0)
  assert rl.loss.hyper.threshold == 0.1
  sft = recipes.sft_train_tmax()
  # the warmup is 3% / 5% of the job's step count (tests/train/test_schedule_horizon.py)
  assert (sft.optimizer.schedule, sft.optimizer.warmup_ratio, sft.optimizer.total_steps) == (
    "linear",
    0.03,
    0,
  )
  assert (sft.epochs, sft.global_batch, sft.loss.policy_loss) == (2, 128, "sft")
  th = recipes.sft_train_terminal_horizon()
  assert (th.optimizer.schedule, th.optimizer.weight_decay, th.optimizer.warmup_ratio) == (
    "cosine",
    0.1,
    0.05,
  )
  assert th.optimizer.total_steps == 0


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="optimizer.schedule"):
    config_lib.OptimizerConfig(schedule="step")
  with pytest.raises(ValueError, match="loss.policy_loss"):
    config_lib.LossConfig(policy_loss="ppo")
  with pytest.raises(ValueError, match="on_nonfinite"):
    config_lib.TrainConfig(on_nonfinite="ignore")


def test_clipping_and_adamw_against_manual_update():
  cfg = config_lib.OptimizerConfig(
    learning_rate=0.1, max_grad_norm=1.0, weight_decay=0.5, total_steps=10
  )
  params = {"w": jnp.array([[1.0, -2.0]]), "norm": {"scale": jnp.array([3.0])}}
  grads = {"w": jnp.array([[3.0, 0.0]]), "norm": {"scale": jnp.array([4.0])}}
  tx = opt_lib.make_optimizer(cfg)
  updates, _ = tx.update(grads, tx.init(params), params)
  # global norm 5 -> clipped grads = g / 5; Adam's first step: m_hat / sqrt(v_hat) = sign(g)
  g = {"w": np.array([[0.6, 0.0]]), "scale": np.array([0.8])}
  adam_w = g["w"] / (np.abs(g["w"]) + 1e-8)
  np.testing.assert_allclose(
    updates["w"], -0.1 * (adam_w + 0.5 * np.array([[1.0, -2.0]])), rtol=1e-5
  )
  # norm scales are excluded from weight decay by default
  np.testing.assert_allclose(updates["norm"]["scale"], -0.1 * np.array([1.0]), rtol=1e-5)
  assert int(opt_lib.optimizer_step_count(tx.update(grads, tx.init(params), params)[1])) == 1


def test_metrics_writer_jsonl_and_tensorboard(tmp_path):
  with MetricsWriter(str(tmp_path / "m.jsonl"), str(tmp_path / "tb")) as w:
    w.write(1, {"loss": np.float32(0.5), "grad_norm": float("nan"), "skip_reason": "x"})
    w.write(2, {"loss": 0.25})
  rows = read_jsonl(tmp_path / "m.jsonl")
  assert [r["step"] for r in rows] == [1, 2] and rows[0]["loss"] == 0.5
  assert rows[0]["grad_norm"] == "nan" and rows[0]["skip_reason"] == "x"
  assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))


def _state(seed=0):
  params = {"dense": {"kernel": jnp.arange(6.0).reshape(2, 3) + seed, "bias": jnp.ones(3)}}
  return state_lib.create(params, opt_lib.make_optimizer(config_lib.OptimizerConfig()), seed)


def test_checkpoint_roundtrip_keep_last_and_interval(tmp_path):
  cfg = config_lib.CheckpointConfig(directory=str(tmp_path / "ck"), save_every=2, keep_last=2)
  st = _state()
  with ckpt_lib.Checkpointer(cfg) as ck:
    saved = [ck.save(s, st.replace(step=jnp.int32(s)), {"pos": s}) for s in range(1, 8)]
    ck.wait()
    assert saved == [False, True, False, True, False, True, False]
    assert ck.all_steps() == [4, 6]
    restored, data, step = ck.restore(_state(seed=5))
  assert step == 6 and data == {"pos": 6} and int(restored.step) == 6
  for a, b in zip(
    jax.tree.leaves((st.params, st.opt_state, st.rng)),
    jax.tree.leaves((restored.params, restored.opt_state, restored.rng)),
    strict=True,
  ):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert sorted(p for p in os.listdir(tmp_path / "ck") if p.isdigit()) == ["4", "6"]


def test_checkpoint_directory_may_be_relative(tmp_path, monkeypatch):
  """Orbax needs absolute paths; a relative directory (as configs give) is resolved, not refused."""
  monkeypatch.chdir(tmp_path)
  cfg = config_lib.CheckpointConfig(directory="runs/ck", save_every=1, keep_last=1)
  with ckpt_lib.Checkpointer(cfg) as ck:
    assert ck.save(1, _state(), {"pos": 1})
    ck.wait()
    _, data, step = ck.restore(_state(seed=3))
  assert (step, data) == (1, {"pos": 1}) and (tmp_path / "runs" / "ck" / "1").is_dir()


def test_checkpoint_never_written_from_nonfinite_state(tmp_path):
  cfg = config_lib.CheckpointConfig(directory=str(tmp_path / "ck"), save_every=1, keep_last=2)
  bad = _state()
  bad = bad.replace(
    params={
      "dense": {
        "kernel": bad.params["dense"]["kernel"].at[0, 0].set(jnp.nan),
        "bias": bad.params["dense"]["bias"],
      }
    }
  )
  with ckpt_lib.Checkpointer(cfg) as ck:
    with pytest.raises(ckpt_lib.NonFiniteStateError, match="step 1"):
      ck.save(1, bad, {})
    assert ck.latest_step() is None
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
      ck.restore(bad)
  assert not [p for p in os.listdir(tmp_path / "ck") if p[0].isdigit()]


def test_checkpoint_config_errors():
  with pytest.raises(ValueError, match="directory"):
    ckpt_lib.Checkpointer(config_lib.CheckpointConfig())
  with pytest.raises(ValueError, match="save_every"):
    config_lib.CheckpointConfig(directory="x", save_every=0)


def test_loss_config_validates_against_the_registry():
  from tmax_jax import rl
  from tmax_jax.rl.losses import DPPOHyper, GRPOHyper

  with pytest.raises(
    ValueError,
    match=r"loss.aggregation='mean'; expected one of \['sequence', "
    r"'token'\]",
  ):
    config_lib.LossConfig(aggregation="mean")
  with pytest.raises(ValueError, match=r"loss.hypers.grpo=DPPOHyper.*: expected a GRPOHyper"):
    config_lib.LossConfig(policy_loss="grpo", hypers={"grpo": DPPOHyper()})
  with pytest.raises(ValueError, match=r"loss.hypers: \['sft'\] are not losses with"):
    config_lib.LossConfig(policy_loss="sft", hypers={"sft": GRPOHyper()})
  with pytest.raises(ValueError, match=r"loss.hypers.dppo: unknown field\(s\) \['divergense'\]"):
    config_lib.LossConfig(hypers={"dppo": {"divergense": "kl"}})
  kl = config_lib.LossConfig(hypers={"dppo": {"divergence": "kl"}})
  assert kl.hyper == DPPOHyper(divergence="kl")
  assert config_lib.LossConfig(policy_loss="grpo").hyper == GRPOHyper()
  assert config_lib.LossConfig(policy_loss="sft").batch_fields() == ()
  assert config_lib.LossConfig(kl_beta=0.5).batch_fields() == (
    "behaviour_logp",
    "advantages",
    "ref_logp",
  )

  # a new loss is one registration: its hyperparameters and inputs reach LossConfig from there
  import dataclasses

  @dataclasses.dataclass(frozen=True)
  class ScaledHyper:
    scale: float = 1.0

  name = "test_scaled_sft"
  if name not in rl.names("policy_loss"):

    @rl.register("policy_loss", name, hyper=ScaledHyper, inputs=("advantages",))
    def _scaled(x, hyper):
      terms = rl.get("policy_loss", "sft")(x)
      return rl.PolicyTerms(loss=hyper.scale * terms.loss, kept=terms.kept)

  cfg = config_lib.LossConfig(policy_loss=name, hypers={name: {"scale": 2.0}})
  assert cfg.hyper == ScaledHyper(2.0) and cfg.batch_fields() == ("advantages",)
  cfg.check_inputs(config_lib.BatchInputs(fields=("advantages",)))
  with pytest.raises(ValueError, match="needs batch field 'advantages', which my data"):
    cfg.check_inputs(config_lib.BatchInputs(source="my data"))
