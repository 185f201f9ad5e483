"""Qwen3.5 (Gated DeltaNet + gated attention) through the server: the engine only sees the generic
[L, B, ...] cache pytree, so conv/recurrent state rides the same prefill/insert/generate path."""

import inference_helpers as helpers
import numpy as np
import pytest
from test_server import Served, _generate_all, _trainer_logprobs

from tmax_jax.inference import sampling


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  d = tmp_path_factory.mktemp("qwen3_5")
  model = helpers.save_tiny("qwen3_5", d, num_hidden_layers=4)  # 3 x linear + 1 x full
  assert "linear_attention" in model.config.layer_types
  s = Served(d)
  s.torch_model = model
  yield s
  s.server.stop()


@pytest.mark.slow
def test_qwen3_5_greedy_matches_transformers_through_grpc(served):
  prompts = helpers.prompts(6, seed=1)  # 6 prompts on 4 slots: slot reuse resets the state
  outs = _generate_all(served.address, prompts, 64)
  assert [o.token_ids for o in outs] == helpers.hf_greedy(served.torch_model, prompts, 64)


@pytest.mark.slow
def test_qwen3_5_logprobs_equal_trainer_logprobs(served):
  prompts = helpers.prompts(3, seed=2)
  outs = _generate_all(served.address, prompts, 24, sampling.SamplingParams(seed=3))
  for p, o in zip(prompts, outs, strict=True):
    ref = _trainer_logprobs(served.cfg, served.params, p, o.token_ids, 1.0)
    np.testing.assert_allclose(np.asarray(o.logprobs), ref, rtol=0, atol=1e-4)
