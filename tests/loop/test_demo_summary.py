"""The demo's results summary: per-phase pass@1 and the paired RL - SFT gain over seeds."""

import numpy as np
import pytest

from tmax_jax.loop import demo


def _seed(sft, rl):
  return {"after_sft": {"pass_at_1": sft}, "after_rl": {"pass_at_1": rl}}


def test_summary_pairs_the_gain_per_seed():
  seeds = [_seed(0.5, 0.75), _seed(0.25, 0.5), _seed(0.75, 0.875)]
  s = demo.summarize(seeds)
  assert s["after_sft"]["mean"] == pytest.approx(0.5)
  assert s["after_rl"]["per_seed"] == [0.75, 0.5, 0.875]
  gains = np.array([0.25, 0.25, 0.125])
  assert s["rl_gain"]["mean"] == pytest.approx(gains.mean())
  # paired: the seeds' common offset cancels, so the gain's stderr is below either phase's
  assert s["rl_gain"]["stderr_over_seeds"] == pytest.approx(gains.std(ddof=1) / np.sqrt(3))
  assert s["rl_gain"]["stderr_over_seeds"] < s["after_sft"]["stderr_over_seeds"]


def test_one_seed_has_zero_stderr_and_pass_rate_is_over_tasks():
  s = demo.summarize([_seed(0.5, 0.25)])
  assert s["rl_gain"] == {"mean": -0.25, "stderr_over_seeds": 0.0, "per_seed": [-0.25]}
  rewards = np.array([[1, 1, 0, 0], [0, 0, 0, 0]], np.float32)
  r = demo.pass_rate(rewards)
  assert r["pass_at_1"] == pytest.approx(0.25) and r["num_tasks"] == 2
  assert r["stderr"] == pytest.approx(np.std([0.5, 0.0], ddof=1) / np.sqrt(2))
