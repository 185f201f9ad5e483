"""Every file in configs/ builds; job configs convert to their typed dataclasses; the large models
they name are validated with jax.eval_shape (no allocation)."""

import pathlib

import pytest

from tmax_jax.config_dict import from_config_dict, load_config_file, to_config_dict
from tmax_jax.loop.config import DemoConfig, RLConfig, SFTConfig

CONFIG_DIR = pathlib.Path(__file__).parents[1] / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.py"))


def _job_class(cd):
  if "seeds" in cd:
    return DemoConfig
  if "rollout" in cd:
    return RLConfig
  if "trajectories" in cd:
    return SFTConfig
  return None


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_builds(path):
  cd = load_config_file(path)
  cls = _job_class(cd)
  if cls is not None:
    cfg = from_config_dict(cls, cd)
    assert to_config_dict(cfg).to_dict() == cd.to_dict()  # lossless round trip


def test_unknown_field_is_named():
  cd = to_config_dict(RLConfig())
  bad = cd.to_dict()
  bad["rollout"]["group_sise"] = 4
  with pytest.raises(ValueError, match=r"config\.rollout: unknown field\(s\) \['group_sise'\]"):
    from_config_dict(RLConfig, bad)


def test_recipe_config_is_table_13():
  cfg = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / "tmax_qwen3_5_9b.py"))
  assert (cfg.rollout.prompts_per_batch, cfg.rollout.group_size, cfg.rollout.async_steps) == (
    8,
    32,
    4,
  )
  assert cfg.rollout.zero_std_filter and cfg.rollout.active_sampling
  assert cfg.train.optimizer.learning_rate == 1e-6 and cfg.train.optimizer.schedule == "constant"
  assert cfg.train.optimizer.max_grad_norm == 1.0 and cfg.steps == 500
  assert cfg.train.loss.policy_loss == "dppo" and cfg.train.loss.hyper.divergence == "tv"
  assert cfg.train.loss.hyper.delta == 0.1 and cfg.train.loss.kl_beta == 0.0
  assert cfg.worker.temperature == 1.0 and cfg.train.temperature == 1.0
  assert cfg.model.head_dtype == "float32" and cfg.model.compute_dtype == "bfloat16"
  assert cfg.episode.max_tool_calls == 64 and cfg.episode.turn_max_tokens == 16384
  assert cfg.episode.max_response_tokens == 65536 and cfg.seq_len == 2048 + 65536
  assert cfg.episode.family == "qwen3_5"
  qwen3 = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / "tmax_qwen3_8b.py"))
  assert qwen3.episode.max_response_tokens == 32768 and qwen3.episode.family == "qwen3"


@pytest.mark.parametrize("name", ["tmax_qwen3_5_9b", "tmax_qwen3_8b", "tmax_qwen3_6_27b"])
def test_large_models_eval_shape(name):
  from tmax_jax.inference import launch_lib
  from tmax_jax.models import registry

  cfg = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / f"{name}.py"))
  model_cfg, _ = launch_lib.model_from_config(cfg.model)
  n = registry.count_params(registry.abstract_params(model_cfg))
  expected = {
    "tmax_qwen3_5_9b": (8e9, 10.5e9),
    "tmax_qwen3_8b": (8.0e9, 8.4e9),
    "tmax_qwen3_6_27b": (25e9, 29e9),
  }[name]
  assert expected[0] < n < expected[1], n


def test_loss_inputs_nothing_produces_fail_at_config_time():
  """A loss that reads a batch field its job's data path does not fill is refused when the job
  config is built (by a config file or from a ConfigDict), naming the field to change."""
  from tmax_jax.agents.worker import WorkerConfig
  from tmax_jax.rl.losses import DPPOHyper
  from tmax_jax.train.config import LossConfig, TrainConfig

  topk = TrainConfig(loss=LossConfig(hyper=DPPOHyper(divergence="topk_tv", top_k=5)))
  with pytest.raises(
    ValueError,
    match=r"train\.loss\.policy_loss='dppo' .*needs batch field "
    r"'topk_ids', which the RL rollout path \(worker\.top_logprobs=0\)",
  ):
    RLConfig(train=topk)
  with pytest.raises(
    ValueError,
    match=r"train\.loss\.hyper\.top_k=5: .* needs 5 behaviour "
    r"logprobs per token, but .*worker\.top_logprobs=3\) returns 3",
  ):
    RLConfig(train=topk, worker=WorkerConfig(top_logprobs=3))
  assert RLConfig(train=topk, worker=WorkerConfig(top_logprobs=5)).train.loss.top_k == 5
  with pytest.raises(ValueError, match=r"train\.loss\.kl_beta=0\.1 needs batch field 'ref_logp'"):
    RLConfig(train=TrainConfig(loss=LossConfig(kl_beta=0.1)))
  with pytest.raises(
    ValueError,
    match=r"train\.loss\.policy_loss='dppo'.*'behaviour_logp', which "
    r"SFT data",
  ):
    SFTConfig(train=TrainConfig())
  with pytest.raises(ValueError, match=r"rl_train\.loss\.kl_beta"):
    DemoConfig(rl_train=TrainConfig(loss=LossConfig(kl_beta=0.1)))
  cd = to_config_dict(RLConfig())  # as launch/train_rl.py builds it from flags
  cd.train.loss.kl_beta = 0.1
  with pytest.raises(ValueError, match=r"train\.loss\.kl_beta"):
    from_config_dict(RLConfig, cd)
  cd.train.loss.kl_beta = 0.0
  cd.train.loss.hyper.divergence = "topk_kl"
  with pytest.raises(ValueError, match=r"'topk_ids'"):
    from_config_dict(RLConfig, cd)
  cd.worker.top_logprobs = 20
  assert from_config_dict(RLConfig, cd).train.loss.hyper.divergence == "topk_kl"


def test_packing_buckets_are_checked_at_config_time():
  from tmax_jax.train.config import PackingConfig, TrainConfig

  short = TrainConfig(packing=PackingConfig(tokens_per_micro_batch=4096, row_lengths=(1024, 2048)))
  with pytest.raises(
    ValueError,
    match=r"row_lengths=\(1024, 2048\): the longest row must hold "
    r"seq_len=8192",
  ):
    RLConfig(train=short)
  assert RLConfig(train=short, seq_len=2048).train.packing.enabled


def test_episode_family_must_be_the_models():
  """One name for the tokenizer/tool-call/stop-token family: a preset's model_type fixes it."""
  from tmax_jax.agents.episode import EpisodeConfig
  from tmax_jax.loop.config import ModelSpec, preset_family

  assert preset_family("qwen3.5-9b") == "qwen3_5" and preset_family("qwen3-8b") == "qwen3"
  qwen3_5 = ModelSpec(preset="qwen3.5-9b")
  with pytest.raises(ValueError, match=r"episode.family='qwen3'.*set episode.family='qwen3_5'"):
    RLConfig(model=qwen3_5, episode=EpisodeConfig(family="qwen3"))
  with pytest.raises(ValueError, match=r"episode.family='qwen3'.*'qwen3_5'"):
    SFTConfig(model=qwen3_5)
  RLConfig(model=qwen3_5, episode=EpisodeConfig(family="qwen3_5"))  # agrees: no error


def test_checkpoint_family_is_checked_on_load(tmp_path):
  """A checkpoint's model_type is only known on load: a Qwen3 checkpoint with Qwen3.5 episodes."""
  import jax

  from tmax_jax.loop import common
  from tmax_jax.loop.config import ModelSpec
  from tmax_jax.models import hf_io, registry

  cfg = registry.preset(
    "qwen3-0.6b",
    vocab_size=128,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
  )
  hf_io.save_pretrained(tmp_path / "ckpt", registry.init_params(cfg, jax.random.key(0)), cfg)
  with pytest.raises(ValueError, match=r"model_type 'qwen3'.*set episode.family='qwen3'"):
    common.load_policy(ModelSpec(checkpoint=str(tmp_path / "ckpt")), "qwen3_5")
  model_cfg, _ = common.load_policy(ModelSpec(checkpoint=str(tmp_path / "ckpt")), "qwen3")
  assert model_cfg.model_type == "qwen3"


def test_standalone_server_stops_on_the_family_tokens():
  """launch/serve.py without engine.stop_token_ids stops where the model family's turns end."""
  from tmax_jax.inference import launch_lib
  from tmax_jax.models import registry
  from tmax_jax.tokenizers import stop_token_ids

  qwen3_5 = registry.preset("qwen3.5-9b")
  assert launch_lib.default_stop_token_ids(qwen3_5) == stop_token_ids("qwen3_5") != ()
  assert launch_lib.default_stop_token_ids(registry.preset("qwen3-8b")) == stop_token_ids("qwen3")
