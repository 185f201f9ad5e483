"""The lr schedule runs over the job's actual step count (OptimizerConfig.total_steps = 0 = the
job's): SFT epochs x ceil(N / global_batch), RL `steps`; warmup ratios apply to that count."""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

from tmax_jax import jobs, recipes
from tmax_jax.loop.config import MeshConfig, ModelSpec, RLConfig, SFTConfig
from tmax_jax.loop.sft import run_sft, total_steps
from tmax_jax.train import config as config_lib
from tmax_jax.train import optimizer as opt_lib

# The shipped configs at their recipe data sizes. TMAX SFT's is not in recipe.md: 12,800
# trajectories is our stated assumption (100 batches of 128, 2 epochs = 200 steps).
# TerminalHorizon's is the recipe's 2,852 trajectories; the recipe gives it no epoch count, so the
# config's 1 epoch of batch 128: ceil(2852 / 128) = 23 steps.
TMAX_SFT_N = 12_800
HORIZON_SFT_N = 2_852
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _lr(opt: config_lib.OptimizerConfig, step: int) -> float:
  return float(opt_lib.make_schedule(opt)(step))


def _cosine(lr, warm, total, step):
  return lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / (total - warm)))


def _shipped(name: str, cls):
  """configs/<name>.py as the job config a launch builds from it."""
  spec = importlib.util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  job = jobs.job_config(module.get_config())
  assert isinstance(job, cls)
  return job


def _linear_last(lr, warm, total):
  return lr / (total - warm)


def _cosine_last(lr, warm, total):
  return _cosine(lr, warm, total, total - 1)


@pytest.mark.parametrize(
  "name, n, steps, warmup, last",
  [
    ("sft_tmax_qwen3_8b", TMAX_SFT_N, 200, 6, _linear_last),
    ("sft_terminal_horizon", HORIZON_SFT_N, 23, 1, _cosine_last),
  ],
)
def test_sft_recipe_lr_at_first_warmup_end_and_last_step(name, n, steps, warmup, last):
  cfg = _shipped(name, SFTConfig)
  total = total_steps(cfg, n)
  assert total == steps
  opt = cfg.train.for_run(total).optimizer
  assert opt.warmup == warmup == round(opt.warmup_ratio * steps)
  lr = opt.learning_rate
  assert _lr(opt, 0) == 0.0  # HF convention: the first step runs at lr 0
  assert math.isclose(_lr(opt, warmup), lr, rel_tol=1e-6)
  assert math.isclose(_lr(opt, steps - 1), last(lr, warmup, steps), rel_tol=1e-5)
  assert _lr(opt, steps - 1) < 0.2 * lr  # the decay happens within the run
  assert _lr(opt, steps) == 0.0  # ... and ends with it


def test_explicit_horizon_is_kept():
  train = recipes.sft_train_terminal_horizon()
  assert train.for_run(23).optimizer.total_steps == 23
  pinned = train.replace(optimizer=train.optimizer.__class__(schedule="cosine", total_steps=50))
  assert pinned.for_run(23).optimizer.total_steps == 50  # set explicitly: kept


def test_unfilled_horizon_is_an_error_naming_the_field():
  with pytest.raises(ValueError, match="optimizer.total_steps=0"):
    opt_lib.make_schedule(recipes.sft_train_terminal_horizon().optimizer)
  opt_lib.make_schedule(config_lib.OptimizerConfig())  # constant, no ratio: no horizon needed


@pytest.mark.parametrize("name", ["tmax_qwen3_8b", "tmax_qwen3_5_9b", "tmax_qwen3_6_27b"])
def test_rl_configs_run_their_schedule_over_their_steps(name):
  cfg = _shipped(name, RLConfig)
  opt = cfg.train.for_run(cfg.steps).optimizer
  assert opt.horizon == cfg.steps == 500
  assert _lr(opt, 0) == pytest.approx(1e-6) == _lr(opt, cfg.steps - 1)  # constant (Table 13)


TINY = dict(
  vocab_size=256,
  hidden_size=16,
  intermediate_size=32,
  num_hidden_layers=1,
  num_attention_heads=2,
  num_key_value_heads=1,
  head_dim=8,
  tie_word_embeddings=False,
)


def test_run_sft_logs_the_lr_of_its_own_horizon(tmp_path):
  """run_sft on 40 trajectories, batch 4, 2 epochs = 20 steps with TerminalHorizon's cosine +
  5% warmup (1 step): the logged lr is the schedule over those 20 steps (on the old fixed
  500-step horizon the run never left its 25-step warmup)."""
  rng = np.random.default_rng(0)
  records = [
    {"tokens": rng.integers(0, 256, 12).tolist(), "loss_mask": [0.0] * 4 + [1.0] * 8}
    for _ in range(40)
  ]
  train = recipes.sft_train_terminal_horizon().replace(
    global_batch=4, epochs=2, logprob_chunk_size=16
  )
  cfg = SFTConfig(
    model=ModelSpec(preset="qwen3-0.6b", overrides=TINY, seed=0),
    train=train,
    mesh=MeshConfig(num_devices=1),
    seq_len=16,
    output_dir=str(tmp_path),
  )
  metrics = run_sft(cfg, records=records).metrics
  assert len(metrics) == 20
  opt = train.for_run(20).optimizer
  want = [_lr(opt, s) for s in range(20)]
  np.testing.assert_allclose([m["lr"] for m in metrics], want, rtol=1e-5)  # fp32, jit vs eager
  assert metrics[0]["lr"] == 0.0 and metrics[1]["lr"] == pytest.approx(1e-5)
  assert metrics[-1]["lr"] == pytest.approx(_cosine(1e-5, 1, 20, 19), rel=1e-5)
