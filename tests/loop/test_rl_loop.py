"""The RL loop end to end on CPU: real sandboxes, real procedural tasks, the real JetStream server over
gRPC, DPPO steps, weight pushes, Orbax checkpoints with resume, and an HF export that transformers
loads and that gives our logits. Also: re-running the model on a finished trajectory reproduces the
server's logprobs, and observation tokens carry no loss weight."""

import asyncio
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.agents.episode import EpisodeConfig, stop_token_ids
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import EpisodeWorker, WorkerConfig
from tmax_jax.loop import common
from tmax_jax.loop.config import ModelSpec, RLConfig, ServingConfig, TaskSource
from tmax_jax.loop.rl import run_rl
from tmax_jax.models import logprobs as logprobs_lib, registry
from tmax_jax.tokenizers.builder import load_tokenizer
from tmax_jax.train import batch as batch_lib
from tmax_jax.train.config import CheckpointConfig, OptimizerConfig, TrainConfig

from tests.conftest import require_base_rootfs

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, tie_word_embeddings=True)


def _config(tmp_path, steps: int) -> RLConfig:
  rollout = RolloutConfig(group_size=2, prompts_per_batch=2, async_steps=1, max_groups_ahead=2,
                          zero_std_filter=False)
  return RLConfig(
      model=ModelSpec(preset="qwen3-0.6b", overrides=TINY, seed=3),
      tasks=TaskSource(families=("write_word",), num_train=4, num_eval=1),
      rollout=rollout,
      episode=EpisodeConfig(max_tool_calls=2, max_turns=2, turn_max_tokens=16,
                            max_response_tokens=96, command_timeout_s=5.0, enable_thinking=False),
      worker=WorkerConfig(max_parallel_episodes=4),
      train=TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-2, total_steps=8),
                        checkpoint=CheckpointConfig(save_every=1, keep_last=2, async_save=False),
                        global_batch=4, logprob_chunk_size=128),
      serving=ServingConfig(max_concurrent_decodes=4, max_len=384, max_prefill_length=384),
      steps=steps, seq_len=384, output_dir=str(tmp_path / "run"))


def test_rl_steps_checkpoint_resume_export(tmp_path):
  require_base_rootfs()
  torch = pytest.importorskip("torch")
  import transformers

  first = run_rl(_config(tmp_path, steps=2))
  assert [m["step"] for m in first.metrics] == [1, 2]
  assert all(m["policy_version"] == m["step"] for m in first.metrics)
  assert all(np.isfinite(m["loss"]) for m in first.metrics)
  assert first.metrics[-1]["rollout/groups_generated"] >= 2

  # a second run with more steps resumes from the step-2 checkpoint instead of starting over
  resumed = run_rl(_config(tmp_path, steps=3))
  assert [m["step"] for m in resumed.metrics] == [3]
  lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(l)["step"] for l in lines] == [1, 2, 3]

  # the export loads in transformers and computes our logits
  hf = transformers.AutoModelForCausalLM.from_pretrained(resumed.export_dir,
                                                          dtype=torch.float32).eval()
  tokens = np.asarray([[9707, 1879, 151644, 872, 198, 13, 42]], np.int64)
  with torch.no_grad():
    ref = hf(torch.from_numpy(tokens)).logits.numpy()
  model = registry.build_model(resumed.model_cfg)
  pos = np.arange(tokens.shape[1])[None]
  hidden, _ = model.apply({"params": resumed.params}, jnp.asarray(tokens, jnp.int32),
                          jnp.asarray(pos, jnp.int32), jnp.ones_like(jnp.asarray(tokens, jnp.int32)))
  ours = np.asarray(logprobs_lib.full_logits(hidden, registry.head_weight(resumed.params,
                                                                          resumed.model_cfg)))
  assert np.max(np.abs(ours - ref)) / np.max(np.abs(ref)) <= 1e-4


def test_trajectory_logprobs_match_the_trainer(tmp_path):
  """The DPPO invariant on a real multi-turn episode: the trainer's chunked logprobs of the
  generated tokens equal the server's behaviour logprobs; observation tokens have no loss."""
  require_base_rootfs()
  cfg = _config(tmp_path, steps=1)
  tokenizer = load_tokenizer("qwen3")
  model_cfg, params = common.load_policy(cfg.model, cfg.episode.family)
  tasks, _ = common.load_tasks(cfg.tasks)
  server = common.start_serving(model_cfg, params, cfg.serving, stop_token_ids(cfg.episode))

  async def episode():
    from tmax_jax.inference.client import RolloutClient
    async with RolloutClient(server.address) as client:
      worker = EpisodeWorker.served(client, tokenizer, cfg.episode,
                                    common.runner_config("", 2048), cfg.worker)
      try:
        return await worker(tasks[0], 0, 0)
      finally:
        await worker.aclose()

  try:
    ep = asyncio.run(episode())
  finally:
    server.stop()
  arrays = ep.trajectory.as_arrays()
  assert ep.num_turns == 2 and arrays["loss_mask"].sum() > 0
  assert (arrays["loss_mask"] == 0).sum() > arrays["loss_mask"].sum()  # prompt + observations
  assert set(arrays["versions"][arrays["loss_mask"] == 1]) == {0}

  traj = batch_lib.Trajectory(tokens=arrays["tokens"], loss_mask=arrays["loss_mask"],
                              behaviour_logp=arrays["logprobs"])
  b = batch_lib.pack([traj], cfg.seq_len)
  model = registry.build_model(model_cfg)
  hidden, _ = model.apply({"params": params}, b.tokens, b.positions, b.segment_ids)
  logp, _ = logprobs_lib.token_logprobs(hidden, registry.head_weight(params, model_cfg),
                                        jnp.asarray(b.targets), chunk_size=128)
  on = b.loss_mask > 0
  np.testing.assert_allclose(np.asarray(logp)[on], b.behaviour_logp[on], atol=1e-4)
  # observation/prompt tokens (loss_mask 0 in the trajectory) get zero weight in the batch
  n = len(arrays["tokens"])
  assert np.all(b.loss_mask[0, :n - 1][arrays["loss_mask"][1:] == 0] == 0)
