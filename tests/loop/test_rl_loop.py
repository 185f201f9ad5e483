"""The RL loop end to end on CPU: real sandboxes, real procedural tasks, the real JetStream server
over gRPC, DPPO steps, weight pushes, Orbax checkpoints with resume, an HF export that
transformers loads and that gives our logits, and the HF export of an earlier kept step. Also:
re-running the model on a finished trajectory reproduces the server's logprobs, and observation
tokens carry no loss weight."""

import asyncio
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import require_base_rootfs
from tests.loop.rl_helpers import assert_same_training, tiny_rl_config
from tmax_jax.agents.episode import stop_token_ids
from tmax_jax.agents.worker import EpisodeWorker
from tmax_jax.export import export_step
from tmax_jax.loop import policy
from tmax_jax.loop.config import MeshConfig, RLConfig
from tmax_jax.loop.rl import run_rl
from tmax_jax.models import hf_io, registry
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.tasks import sources
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.tokenizers.builder import load_tokenizer
from tmax_jax.train import batch as batch_lib


def _config(tmp_path, steps: int) -> RLConfig:
  """Colocated on all 8 devices: the trainer on data=2 x fsdp=2 x tensor=2, the server on the
  first of them; every step's batch is recorded."""
  return tiny_rl_config(
    tmp_path / "run",
    steps,
    mesh=MeshConfig(data=2, fsdp=2, tensor=2),
    record_dir=str(tmp_path / "batches"),
  )


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_rl_steps_checkpoint_resume_export(tmp_path):
  require_base_rootfs()
  torch = pytest.importorskip("torch")
  import transformers

  first = run_rl(_config(tmp_path, steps=2))
  assert [m["step"] for m in first.metrics] == [1, 2]
  assert all(m["policy_version"] == m["step"] for m in first.metrics)
  assert all(np.isfinite(m["loss"]) for m in first.metrics)
  assert first.metrics[-1]["rollout/groups_generated"] >= 2
  q = first.params["model"]["layers"]["self_attn"]["q_proj"]["kernel"]
  assert len(q.sharding.device_set) == 8 and q.sharding.spec[1:3] == ("fsdp", "tensor")
  after_two = jax.device_get(first.params)

  # the same batches replayed on one device train to the same losses and params
  single = run_rl(tiny_rl_config(tmp_path / "single", 2, replay_dir=str(tmp_path / "batches")))
  assert_same_training(first.metrics, after_two, single.metrics, single.params)

  # a second run with more steps resumes from the step-2 checkpoint instead of starting over
  resumed = run_rl(_config(tmp_path, steps=3))
  assert [m["step"] for m in resumed.metrics] == [3]
  lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
  assert [row["step"] for row in lines] == [1, 2, 3]
  # async mode: the data position grew by exactly the groups the resumed step consumed, so none
  # consumed before the restart was drawn again (in-flight ones were: tests/loop/test_task_stream)
  consumed = lines[2]["rollout/groups_generated"]
  assert consumed >= 2 and lines[2]["data/consumed"] == lines[1]["data/consumed"] + consumed

  # a kept step other than the last exports to HF from the run's checkpoints alone
  step_two = export_step(str(tmp_path / "run" / "ckpt"), 2, str(tmp_path / "hf-step2"))
  _, exported = hf_io.load_pretrained(step_two)
  for a, b in zip(jax.tree.leaves(exported), jax.tree.leaves(after_two), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  # the export loads in transformers and computes our logits
  hf = transformers.AutoModelForCausalLM.from_pretrained(
    resumed.export_dir, dtype=torch.float32
  ).eval()
  tokens = np.asarray([[9707, 1879, 151644, 872, 198, 13, 42]], np.int64)
  with torch.no_grad():
    ref = hf(torch.from_numpy(tokens)).logits.numpy()
  model = registry.build_model(resumed.model_cfg)
  pos = np.arange(tokens.shape[1])[None]
  hidden, _ = model.apply(
    {"params": resumed.params},
    jnp.asarray(tokens, jnp.int32),
    jnp.asarray(pos, jnp.int32),
    jnp.ones_like(jnp.asarray(tokens, jnp.int32)),
  )
  ours = np.asarray(
    logprobs_lib.full_logits(hidden, registry.head_weight(resumed.params, resumed.model_cfg))
  )
  assert np.max(np.abs(ours - ref)) / np.max(np.abs(ref)) <= 1e-4


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_rl_disaggregated_equals_a_single_device_replay(tmp_path):
  """Disaggregated on 8 devices: the trainer on fsdp=2 x tensor=2 over devices 0-3, the server on
  devices 4-7 (2 replicas x tensor 2); its recorded batches replayed on one device train to the
  same losses and params."""
  require_base_rootfs()
  serving = dataclasses.replace(
    tiny_rl_config(tmp_path, 1).serving, placement="disaggregated", devices=4, replicas=2, tensor=2
  )
  cfg = tiny_rl_config(
    tmp_path / "run",
    2,
    mesh=MeshConfig(fsdp=2, tensor=2),
    serving=serving,
    record_dir=str(tmp_path / "batches"),
  )
  run = run_rl(cfg)
  assert [m["policy_version"] for m in run.metrics] == [1, 2]
  q = run.params["model"]["layers"]["self_attn"]["q_proj"]["kernel"]
  assert {d.id for d in q.sharding.device_set} == {0, 1, 2, 3}
  single = run_rl(tiny_rl_config(tmp_path / "single", 2, replay_dir=str(tmp_path / "batches")))
  assert_same_training(run.metrics, run.params, single.metrics, single.params)


def test_trajectory_logprobs_match_the_trainer(tmp_path):
  """The DPPO invariant on a real multi-turn episode: the trainer's chunked logprobs of the
  generated tokens equal the server's behaviour logprobs; observation tokens have no loss. The
  server is the eval jobs' one (policy.serve_policy) on a 4-device mesh: 2 replicas x tensor 2,
  the policy loaded straight into its shardings."""
  require_base_rootfs()
  cfg = _config(tmp_path, steps=1)
  tokenizer = load_tokenizer("qwen3")
  model_cfg, params, _ = policy.load_policy(cfg.model, cfg.episode)
  tasks, _ = sources.load_split(cfg.tasks)
  serving = dataclasses.replace(cfg.serving, replicas=2, tensor=2)
  server = policy.serve_policy(cfg.model, serving, stop_token_ids(cfg.episode))
  served = server.engine.load_params()[1].get()[0]["params"]
  q = served["model"]["layers"]["self_attn"]["q_proj"]["kernel"]  # [L, D, N, H], replica 1
  assert {d.id for d in q.sharding.device_set} == {2, 3}
  assert q.addressable_shards[0].data.shape[2] == 1  # N = 2 heads over tensor 2

  async def episode():
    from tmax_jax.inference.client import RolloutClient

    async with RolloutClient(server.address) as client:
      worker = EpisodeWorker.served(
        client, tokenizer, cfg.episode, RunnerConfig(memory_mb=2048), cfg.worker
      )
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

  traj = batch_lib.Trajectory(
    tokens=arrays["tokens"], loss_mask=arrays["loss_mask"], behaviour_logp=arrays["logprobs"]
  )
  b = batch_lib.pack([traj], cfg.seq_len)
  model = registry.build_model(model_cfg)
  hidden, _ = model.apply({"params": params}, b.tokens, b.positions, b.segment_ids)
  logp, _ = logprobs_lib.token_logprobs(
    hidden, registry.head_weight(params, model_cfg), jnp.asarray(b.targets), chunk_size=128
  )
  on = b.loss_mask > 0
  np.testing.assert_allclose(np.asarray(logp)[on], b.behaviour_logp[on], atol=1e-4)
  # observation/prompt tokens (loss_mask 0 in the trajectory) get zero weight in the batch
  n = len(arrays["tokens"])
  assert np.all(b.loss_mask[0, : n - 1][arrays["loss_mask"][1:] == 0] == 0)
