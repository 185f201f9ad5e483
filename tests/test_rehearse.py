"""The rehearsal's pure parts (no device work): the mesh and serving scaling rules, and what each
shipped config keeps and shrinks. The runs themselves are tests/test_rehearse_configs.py (slow)."""

import dataclasses
import math
import pathlib

import pytest

from tmax_jax import jobs
from tmax_jax.config_dict import load_config_file
from tmax_jax.loop import policy
from tmax_jax.loop.config import MeshConfig, ServingConfig
from tmax_jax.rehearse import run, shrink
from tmax_jax.rehearse import tasks as tasks_lib
from tmax_jax.tasks import format as fmt

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted(ROOT.glob("configs/*.py"))


def recipe_configs(job: str | None = None) -> list[pathlib.Path]:
  """The shipped configs that name a recipe run (RL, SFT, eval), told by jobs.job_of."""
  out = []
  for path in CONFIGS:
    try:
      name = jobs.job_of(load_config_file(path))[0]
    except ValueError:
      continue
    endpoint = name == "eval" and load_config_file(path).get("policy") == "endpoint"
    if (name == job or (job is None and name in ("rl", "sft", "eval"))) and not endpoint:
      out.append(path)  # an endpoint eval's model is the user's (run.plan skips it)
  return out


@pytest.mark.parametrize(
  "mesh, shipped, expected",
  [
    (MeshConfig(fsdp=1, sequence=8), 8, MeshConfig(fsdp=1, sequence=8)),  # 9B: spans every device
    (MeshConfig(fsdp=1, sequence=32), 32, MeshConfig(fsdp=1, sequence=8)),
    (MeshConfig(fsdp=4, sequence=8), 32, MeshConfig(fsdp=2, sequence=4)),  # 27B: 4 hosts of 8
    (MeshConfig(fsdp=8), 8, MeshConfig(fsdp=8)),
    (MeshConfig(fsdp=2, sequence=4), 8, MeshConfig(fsdp=2, sequence=4)),
    (MeshConfig(fsdp=-1), 64, MeshConfig(fsdp=8)),
    (MeshConfig(data=2, fsdp=16, tensor=2), 64, MeshConfig(data=2, fsdp=2, tensor=2)),
    (MeshConfig(fsdp=2), 2, MeshConfig(fsdp=2, num_devices=2)),  # smaller: the rest stay idle
  ],
)
def test_scale_mesh_keeps_axes_and_a_spanning_sequence(mesh, shipped, expected):
  scaled = shrink.scale_mesh(mesh, shipped, 8)
  assert scaled == expected
  before = shrink.resolved_sizes(mesh, shipped)
  after = scaled.sizes()
  assert all(after[a] > 1 for a, n in before.items() if n > 1)
  assert math.prod(after.values()) == (scaled.num_devices or 8)


def test_scale_mesh_refuses_what_cannot_keep_every_axis():
  with pytest.raises(ValueError, match="keeping every axis > 1 at > 1"):
    shrink.scale_mesh(MeshConfig(data=2, fsdp=2, sequence=2, tensor=2), 16, 8)


def test_scale_serving():
  assert shrink.scale_serving(ServingConfig(replicas=2, tensor=4), 8).replicas == 2
  big = shrink.scale_serving(ServingConfig(replicas=8, tensor=8), 8)
  assert (big.replicas, big.tensor) == (2, 4)  # tensor kept largest: it shapes the params' split
  dis = shrink.scale_serving(
    ServingConfig(placement="disaggregated", devices=8, replicas=2, tensor=4), 8
  )
  assert (dis.replicas, dis.tensor, dis.devices) == (2, 2, 4)


def test_coin_task_is_a_valid_tb2_task(tmp_path):
  task = tasks_lib.coin_tasks(1)[0]
  written = fmt.load_task(tasks_lib.write_tasks(tmp_path, [task]) / task.name)
  assert written.name.startswith("coin-") and b"/dev/urandom" in written.tests["test.sh"]
  assert written.config.verifier.timeout_sec < 600  # the 600 s floor is what sets it


def _plan(path: pathlib.Path, tmp_path):
  return run.plan(path.stem, load_config_file(path), tmp_path / path.stem)


def test_every_config_is_rehearsed_or_skipped_with_a_reason(tmp_path):
  assert len(recipe_configs("rl")) >= 3 and recipe_configs("sft") and recipe_configs("eval")
  for path in CONFIGS:
    job, r, skipped = _plan(path, tmp_path)
    assert (r is None) == bool(skipped), path
    if path in recipe_configs():
      assert r is not None and r.job == job, path
      assert r.cfg.output_dir.startswith(str(tmp_path)), path
    else:
      assert "not a" in skipped, (path, skipped)


def _check_mesh_scaled(shipped, cfg):
  """The rehearsal's trainer mesh keeps every shipped axis > 1 at > 1, and a sequence axis that
  spans every shipped device spans every rehearsal one (shrink.scale_mesh)."""
  ship_mesh = shrink.resolved_sizes(shipped.mesh, shipped.topology.devices)
  assert all(cfg.mesh.sizes()[ax] > 1 for ax, n in ship_mesh.items() if n > 1)
  spans = ship_mesh["sequence"] == shipped.topology.devices
  assert (cfg.mesh.sequence == shrink.DEVICES) == spans


@pytest.mark.parametrize("path", recipe_configs("rl"), ids=lambda p: p.stem)
def test_rl_rehearsal_keeps_the_recipe(path, tmp_path):
  _, r, _ = _plan(path, tmp_path)
  shipped, cfg = r.shipped, r.cfg
  shrink.check_changes(shipped, cfg, r.changes)  # nothing changed that the table does not list
  # the same family and architecture, one period of its layer pattern, the real vocabulary
  a, b = policy.model_config(shipped.model), policy.model_config(cfg.model)
  assert (b.model_type, b.vocab_size, b.attn_output_gate, b.qk_norm) == (
    a.model_type,
    a.vocab_size,
    a.attn_output_gate,
    a.qk_norm,
  )
  if getattr(a.family_config, "layer_types", None):
    kinds = b.family_config.layer_types
    assert kinds == a.family_config.layer_types[: len(kinds)] and len(set(kinds)) > 1
  assert b.hidden_size < a.hidden_size and b.num_hidden_layers < a.num_hidden_layers
  same = [
    "model.param_dtype",
    "model.compute_dtype",
    "model.head_dtype",
    "model.overrides.attention_impl",
    "model.overrides.remat_policy",
    "serving.param_dtype",
    "serving.placement",
    "train.loss",
    "train.optimizer",
    "train.checkpoint",
    "rollout.async_steps",
    "rollout.zero_std_filter",
    "rollout.active_sampling",
    "worker.temperature",
    "worker.top_logprobs",
    "episode.harness",
    "episode.family",
    "episode.max_prompt_tokens",
    "episode.max_tool_calls",
    "episode.max_turns",
    "episode.command_timeout_s",
    "episode.wall_time_s",
    "runner",
  ]
  for field in same:
    want = shrink.get_path(shipped, field)
    if field == "serving.placement" and want == "nodes":  # no Ray in a rehearsal: in process
      want = "colocated"
    if field == "runner" and want.sandbox_hosts:  # likewise its sandboxes, nothing else
      want = dataclasses.replace(want, sandbox_hosts="")
    assert shrink.get_path(cfg, field) == want, field
  assert cfg.seq_len - cfg.episode.max_response_tokens == (
    shipped.seq_len - shipped.episode.max_response_tokens
  )  # the prompt's room (the 2048 cap) is kept
  assert cfg.train.packing.enabled == shipped.train.packing.enabled
  if cfg.train.packing.enabled:
    old, new = shipped.train.packing.row_lengths, cfg.train.packing.row_lengths
    assert len(new) == len(old) and new[-1] == cfg.seq_len
    assert [n * old[-1] // new[-1] for n in new] == list(old)  # buckets scaled, ratios kept
  _check_mesh_scaled(shipped, cfg)
  assert (cfg.serving.replicas, cfg.serving.tensor) == (
    shipped.serving.replicas,
    shipped.serving.tensor,
  )
  assert (cfg.steps, cfg.rollout.prompts_per_batch * cfg.rollout.group_size) == (2, 8)


def test_the_9b_rehearsal_keeps_qwen3_5_dtypes_packing_and_the_spanning_sequence(tmp_path):
  """Issue 30's acceptance, the pure half: the 9B rehearsal is Qwen3.5 with fp32 masters, a bf16
  server and the fp32 head, packed, with sequence = every trainer device (the run: slow test)."""
  _, r, _ = _plan(ROOT / "configs/tmax_qwen3_5_9b.py", tmp_path)
  model = policy.model_config(r.cfg.model)
  assert model.model_type == "qwen3_5_text"
  assert set(model.family_config.layer_types) == {"linear_attention", "full_attention"}
  assert model.attn_output_gate
  assert (model.dtypes.param_dtype, model.dtypes.compute_dtype, model.dtypes.head_dtype) == (
    "float32",
    "bfloat16",
    "float32",
  )
  served = policy.served_config(model, r.cfg.serving).dtypes
  assert (served.param_dtype, served.head_dtype) == ("bfloat16", "float32")
  assert r.cfg.train.packing.enabled and r.cfg.mesh.sequence == shrink.DEVICES
  assert r.cfg.serving.placement == "colocated"
  kept = dict(r.kept)
  assert "sequence spans every trainer device" in kept["trainer mesh"]
  assert kept["dtypes (param / compute / head / served)"] == (
    "float32 / bfloat16 / float32 / bfloat16"
  )
  assert "dppo" in kept["loss"] and "blockwise" in kept["attention impl"]
  table = r.table()
  assert "shrunk:" in table and "kept:" in table and "model.overrides" in table


@pytest.mark.parametrize("path", recipe_configs("sft"), ids=lambda p: p.stem)
def test_sft_rehearsal_keeps_the_recipe(path, tmp_path):
  _, r, _ = _plan(path, tmp_path)
  shipped, cfg = r.shipped, r.cfg
  for field in (
    "model.param_dtype",
    "model.compute_dtype",
    "model.head_dtype",
    "train.loss",
    "train.optimizer",
    "train.epochs",
    "runner",
    "episode",
  ):
    assert shrink.get_path(cfg, field) == shrink.get_path(shipped, field), field
  assert cfg.trajectories == "" and cfg.tasks.num_train == shrink.SFT_TASKS
  assert cfg.train.packing.enabled == shipped.train.packing.enabled
  _check_mesh_scaled(shipped, cfg)
  if shipped.topology.devices == shrink.DEVICES:
    assert cfg.mesh.sizes() == shipped.mesh.sizes()  # an 8-device mesh is rehearsed as shipped


@pytest.mark.parametrize("path", recipe_configs("eval"), ids=lambda p: p.stem)
def test_eval_rehearsal_keeps_policy_harness_and_runs(path, tmp_path):
  _, r, _ = _plan(path, tmp_path)
  shipped, cfg = r.shipped, r.cfg
  for field in (
    "policy",
    "runs_per_task",
    "pass_ks",
    "worker",
    "runner",
    "episode.harness",
    "episode.family",
    "episode.max_tool_calls",
    "episode.max_turns",
    "episode.wall_time_s",
    "episode.max_prompt_tokens",
  ):
    assert shrink.get_path(cfg, field) == shrink.get_path(shipped, field), field
  tasks = sorted(p.name for p in pathlib.Path(cfg.tasks_dir).iterdir())
  assert len(tasks) == shrink.EVAL_TASKS
  if cfg.policy == "server":
    assert cfg.address == "" and cfg.model.preset  # served here: a tiny model of the family
    model = policy.model_config(cfg.model)
    assert shrink.family_preset(cfg.episode.family) == cfg.model.preset
    assert model.vocab_size >= 151000  # the real vocabulary


def test_engine_holds_episode_rule():
  from tmax_jax.agents.episode import EpisodeConfig
  from tmax_jax.inference.engine import EngineConfig

  capped = EpisodeConfig(max_prompt_tokens=2048, max_response_tokens=65536)
  fits = EngineConfig(max_len=67584, max_prefill_length=67584)
  assert shrink.engine_holds_episode(fits, capped) == ""
  short = EngineConfig(max_len=65536, max_prefill_length=32768)
  assert "max_len=65536 <" in shrink.engine_holds_episode(short, capped)
  uncapped = EpisodeConfig(max_response_tokens=262144 - 32768)
  th = EngineConfig(max_len=262144, max_prefill_length=32768)
  assert "max_prefill_length=32768 <" in shrink.engine_holds_episode(th, uncapped)
  assert (
    shrink.engine_holds_episode(EngineConfig(max_len=262144, max_prefill_length=262144), uncapped)
    == ""
  )


@pytest.mark.parametrize(
  "path", recipe_configs("rl") + recipe_configs("eval"), ids=lambda p: p.stem
)
def test_shipped_server_holds_the_longest_episode(path):
  """Each turn's request carries the whole context: a shipped server (in process, or the eval
  configs' with address '') must hold and prefill prompt + the response cap, or a long episode's
  requests are rejected mid-run (eval_server and eval_terminal_horizon prefilled 32768)."""
  cfg = jobs.job_config(load_config_file(path))
  if getattr(cfg, "policy", "server") == "server":
    assert shrink.engine_holds_episode(cfg.serving.engine, cfg.episode) == ""
