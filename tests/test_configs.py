"""Every file in configs/ loads, validates and round-trips as its typed job config; each config
fact has one definition (temperatures, the derived family, the loss by name); the large models
the recipes name are validated with jax.eval_shape (no allocation)."""

import pathlib

import jax
import numpy as np
import pytest

from tmax_jax import jobs, recipes, rl
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import from_config_dict, load_config_file, to_config_dict
from tmax_jax.loop import policy
from tmax_jax.loop.config import DemoConfig, ModelSpec, RLConfig, SFTConfig
from tmax_jax.models import hf_io, registry
from tmax_jax.rl.losses import DPPOHyper, GRPOHyper
from tmax_jax.train.config import LossConfig, PackingConfig, TrainConfig

CONFIG_DIR = pathlib.Path(__file__).parents[1] / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.py"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_loads_validates_and_round_trips(path):
  cd = load_config_file(path)
  name, cls, launcher = jobs.job_of(cd)
  cfg = from_config_dict(cls, cd)
  assert isinstance(cfg, cls) and (CONFIG_DIR.parent / launcher).exists()
  assert to_config_dict(cfg).to_dict() == cd.to_dict()  # lossless round trip


def test_unknown_field_is_named():
  cd = to_config_dict(RLConfig())
  bad = cd.to_dict()
  bad["rollout"]["group_sise"] = 4
  with pytest.raises(ValueError, match=r"config\.rollout: unknown field\(s\) \['group_sise'\]"):
    from_config_dict(RLConfig, bad)


def test_recipe_config_is_table_13():
  cfg = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / "tmax_qwen3_5_9b.py"))
  rollout = cfg.rollout
  assert (rollout.prompts_per_batch, rollout.group_size, rollout.async_steps) == (8, 32, 4)
  assert rollout.zero_std_filter and rollout.active_sampling
  assert cfg.train.optimizer.learning_rate == 1e-6 and cfg.train.optimizer.schedule == "constant"
  assert cfg.train.optimizer.max_grad_norm == 1.0 and cfg.steps == 500
  assert cfg.train.loss.policy_loss == "dppo" and cfg.train.loss.hyper.divergence == "tv"
  assert cfg.train.loss.hyper.delta == 0.1 and cfg.train.loss.kl_beta == 0.0
  assert cfg.train.loss.estimator == "centered"  # DPPO's own ("auto")
  assert cfg.worker.temperature == 1.0 and cfg.train.temperature == 1.0
  assert cfg.model.head_dtype == "float32" and cfg.model.compute_dtype == "bfloat16"
  assert cfg.episode.max_tool_calls == 64 and cfg.episode.turn_max_tokens == 16384
  assert cfg.episode.max_response_tokens == 65536 and cfg.seq_len == 2048 + 65536
  assert cfg.episode.max_prompt_tokens == 2048 and cfg.episode.command_timeout_s == 120.0
  assert cfg.runner.memory_mb == 4096 and cfg.runner.min_verifier_timeout_s == 600.0
  assert cfg.episode.family == "qwen3_5"  # derived from the preset, not set by the recipe
  qwen3 = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / "tmax_qwen3_8b.py"))
  assert qwen3.episode.max_response_tokens == 32768 and qwen3.episode.family == "qwen3"


@pytest.mark.parametrize("name", ["tmax_qwen3_5_9b", "tmax_qwen3_8b", "tmax_qwen3_6_27b"])
def test_large_models_eval_shape(name):
  cfg = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / f"{name}.py"))
  n = registry.count_params(registry.abstract_params(policy.model_config(cfg.model)))
  expected = {
    "tmax_qwen3_5_9b": (8e9, 10.5e9),
    "tmax_qwen3_8b": (8.0e9, 8.4e9),
    "tmax_qwen3_6_27b": (25e9, 29e9),
  }[name]
  assert expected[0] < n < expected[1], n


def test_loss_is_switchable_by_name_on_a_recipe_config():
  """--config.train.loss.policy_loss=grpo on the DPPO recipe gives GRPO with its recipe defaults
  (PPO clip 0.2 / 0.272), and GRPO's own settings are overridable the same way."""
  cd = load_config_file(CONFIG_DIR / "tmax_qwen3_5_9b.py")
  cd.train.loss.policy_loss = "grpo"
  cfg = from_config_dict(RLConfig, cd)
  assert cfg.train.loss.hyper == GRPOHyper(clip_low=0.2, clip_high=0.272)
  cd.train.loss.hypers.grpo.clip_high = 0.3
  assert from_config_dict(RLConfig, cd).train.loss.hyper.clip_high == 0.3
  ablation = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / "tmax_qwen3_5_9b_grpo.py"))
  same = to_config_dict(recipes.tmax_qwen3_5_9b()).to_dict()
  other = to_config_dict(ablation).to_dict()
  assert other["train"]["loss"].pop("policy_loss") == "grpo"
  assert same["train"]["loss"].pop("policy_loss") == "dppo"
  assert other.pop("output_dir") != same.pop("output_dir")
  assert other == same  # nothing else differs from the DPPO run


def test_grpo_arm_std_normalises_its_advantages():
  """GRPO's advantage is (R - mean) / (std + 1e-8) per group: the GRPO config, and any recipe
  switched to policy_loss=grpo, train on those; advantage=centered keeps DPPO's centred ones."""
  rewards = np.array([1, 0, 0, 0, 1, 1, 1, 0], np.float32)
  ids = np.repeat([0, 1], 4)
  r = rewards.reshape(2, 4)
  centred = (r - r.mean(1, keepdims=True)).ravel()
  std_normalised = centred / (np.repeat(r.std(1), 4) + 1e-8)

  def advantages(loss: LossConfig) -> np.ndarray:  # as loop/rl.py computes a step's advantages
    return np.asarray(rl.get("advantage", loss.estimator)(rewards, ids))

  ablation = from_config_dict(RLConfig, load_config_file(CONFIG_DIR / "tmax_qwen3_5_9b_grpo.py"))
  np.testing.assert_allclose(advantages(ablation.train.loss), std_normalised, rtol=1e-6)
  cd = load_config_file(CONFIG_DIR / "tmax_qwen3_5_9b.py")
  np.testing.assert_allclose(advantages(from_config_dict(RLConfig, cd).train.loss), centred)
  cd.train.loss.policy_loss = "grpo"
  assert from_config_dict(RLConfig, cd).train.loss.estimator == "standard"
  cd.train.loss.advantage = "centered"  # GRPO's objective on centred advantages
  np.testing.assert_allclose(advantages(from_config_dict(RLConfig, cd).train.loss), centred)
  assert LossConfig(policy_loss="grpo").estimator == "standard"
  assert LossConfig(policy_loss="dppo").estimator == "centered"
  assert LossConfig(policy_loss="sft").estimator == "centered"  # reads no advantages
  assert LossConfig(policy_loss="dppo", advantage="standard").estimator == "standard"


def test_train_config_is_hashable_and_hashes_its_hypers():
  """The memory plan caches compiles keyed by TrainConfig (plan.compiled_micro_memory): the loss's
  hypers dict must not make it unhashable, and different hypers must not collide as equal."""
  cfg = recipes.tmax_qwen3_5_9b().train
  assert hash(cfg) == hash(from_config_dict(TrainConfig, to_config_dict(cfg)))
  grpo = LossConfig(hypers={"grpo": GRPOHyper(clip_low=0.2, clip_high=0.3)})
  assert grpo != LossConfig() and hash(grpo) != hash(LossConfig())


def test_loss_and_advantage_names_are_checked_at_config_time():
  with pytest.raises(ValueError, match=r"loss\.advantage='median'; expected one of"):
    LossConfig(advantage="median")
  with pytest.raises(ValueError, match=r"loss\.hypers: \['sft'\] are not losses with"):
    LossConfig(hypers={"sft": {}})
  with pytest.raises(ValueError, match=r"loss\.hypers\.dppo: unknown field\(s\) \['divergense'\]"):
    LossConfig(hypers={"dppo": {"divergense": "kl"}})
  assert LossConfig(hypers={"dppo": {"divergence": "kl"}}).hyper == DPPOHyper(divergence="kl")
  assert LossConfig(policy_loss="sft").hyper is None


def test_trainer_and_sampler_temperatures_must_agree():
  """DPPO's ratio compares the trainer's logprobs with the server's: one distribution."""
  hot = WorkerConfig(temperature=0.7)
  with pytest.raises(ValueError, match=r"train\.temperature=1\.0 != worker\.temperature=0\.7"):
    RLConfig(worker=hot)
  with pytest.raises(ValueError, match=r"train\.temperature=1\.0 != worker\.temperature=0\.7"):
    DemoConfig(worker=hot)
  assert RLConfig(worker=hot, train=TrainConfig(temperature=0.7)).worker.temperature == 0.7


def test_loss_inputs_nothing_produces_fail_at_config_time():
  """A loss that reads a batch field its job's data path does not fill is refused when the job
  config is built (by a config file or from a ConfigDict), naming the field to change."""
  topk = TrainConfig(loss=LossConfig(hypers={"dppo": DPPOHyper(divergence="topk_tv", top_k=5)}))
  with pytest.raises(
    ValueError,
    match=r"train\.loss\.policy_loss='dppo' .*needs batch field "
    r"'topk_ids', which the RL rollout path \(worker\.top_logprobs=0\)",
  ):
    RLConfig(train=topk)
  with pytest.raises(
    ValueError,
    match=r"train\.loss\.hypers\.dppo\.top_k=5: .* needs 5 behaviour "
    r"logprobs per token, but .*worker\.top_logprobs=3\) returns 3",
  ):
    RLConfig(train=topk, worker=WorkerConfig(top_logprobs=3))
  assert RLConfig(train=topk, worker=WorkerConfig(top_logprobs=5)).train.loss.top_k == 5
  with pytest.raises(ValueError, match=r"train\.loss\.kl_beta=0\.1 needs batch field 'ref_logp'"):
    RLConfig(train=TrainConfig(loss=LossConfig(kl_beta=0.1)))
  with pytest.raises(
    ValueError, match=r"train\.loss\.policy_loss='dppo'.*'behaviour_logp', which SFT data"
  ):
    SFTConfig(train=TrainConfig())
  with pytest.raises(ValueError, match=r"rl_train\.loss\.kl_beta"):
    DemoConfig(rl_train=TrainConfig(loss=LossConfig(kl_beta=0.1)))
  cd = to_config_dict(RLConfig())  # as launch/train_rl.py builds it from flags
  cd.train.loss.kl_beta = 0.1
  with pytest.raises(ValueError, match=r"train\.loss\.kl_beta"):
    from_config_dict(RLConfig, cd)
  cd.train.loss.kl_beta = 0.0
  cd.train.loss.hypers.dppo.divergence = "topk_kl"
  with pytest.raises(ValueError, match=r"'topk_ids'"):
    from_config_dict(RLConfig, cd)
  cd.worker.top_logprobs = 20
  assert from_config_dict(RLConfig, cd).train.loss.hyper.divergence == "topk_kl"


def test_packing_buckets_are_checked_at_config_time():
  short = TrainConfig(packing=PackingConfig(tokens_per_micro_batch=4096, row_lengths=(1024, 2048)))
  with pytest.raises(
    ValueError, match=r"row_lengths=\(1024, 2048\): the longest row must hold seq_len=8192"
  ):
    RLConfig(train=short)
  assert RLConfig(train=short, seq_len=2048).train.packing.enabled


def test_episode_family_follows_the_model():
  """One name for the tokenizer/tool-call/stop-token family: derived from the preset's model_type
  when unset, checked when set."""
  qwen3_5 = ModelSpec(preset="qwen3.5-9b")
  assert RLConfig(model=qwen3_5).episode.family == "qwen3_5"
  assert SFTConfig(model=ModelSpec(preset="qwen3-8b")).episode.family == "qwen3"
  with pytest.raises(ValueError, match=r"episode.family='qwen3'.*set episode.family='qwen3_5'"):
    RLConfig(model=qwen3_5, episode=EpisodeConfig(family="qwen3"))
  RLConfig(model=qwen3_5, episode=EpisodeConfig(family="qwen3_5"))  # agrees: no error


def _tiny_checkpoint(path):
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
  hf_io.save_pretrained(path, registry.init_params(cfg, jax.random.key(0)), cfg)
  return str(path)


def test_checkpoint_family_is_derived_and_checked(tmp_path):
  """A checkpoint's model_type (its config.json) fixes the family: derived at config time when the
  directory is here, else on load; a disagreeing family fails either way."""
  ckpt = _tiny_checkpoint(tmp_path / "ckpt")
  assert RLConfig(model=ModelSpec(checkpoint=ckpt)).episode.family == "qwen3"
  with pytest.raises(ValueError, match=r"model_type 'qwen3'.*set episode.family='qwen3'"):
    RLConfig(model=ModelSpec(checkpoint=ckpt), episode=EpisodeConfig(family="qwen3_5"))
  missing = RLConfig(model=ModelSpec(checkpoint=str(tmp_path / "elsewhere")))
  assert missing.episode.family == ""  # not known until the job loads it
  with pytest.raises(ValueError, match=r"model_type 'qwen3'.*set episode.family='qwen3'"):
    policy.load_policy(ModelSpec(checkpoint=ckpt), EpisodeConfig(family="qwen3_5"))
  model_cfg, _, episode = policy.load_policy(ModelSpec(checkpoint=ckpt), EpisodeConfig())
  assert model_cfg.model_type == "qwen3" and episode.family == "qwen3"


def test_standalone_server_stops_on_the_family_tokens():
  """launch/serve.py without serving.engine.stop_token_ids stops where the family's turns end."""
  qwen3_5 = registry.preset("qwen3.5-9b")
  spec = registry.tokenizer_spec
  assert policy.default_stop_token_ids(qwen3_5) == spec("qwen3_5").stop_token_ids() != ()
  qwen3 = registry.preset("qwen3-8b")
  assert policy.default_stop_token_ids(qwen3) == spec("qwen3").stop_token_ids()
