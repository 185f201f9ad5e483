"""Checkpoints a user can go back to: every `keep_every`-th step kept for good besides the last
`keep_last`, and `python3 -m tmax_jax.export --step S` writing the HF export of any kept step
(real Orbax checkpoints, a real tiny model, transformers loading the export)."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax import export as export_lib
from tmax_jax.models import hf_io, registry
from tmax_jax.train import checkpoint as ckpt_lib
from tmax_jax.train import config as config_lib
from tmax_jax.train import optimizer as opt_lib
from tmax_jax.train import state as state_lib

TINY = dict(
  vocab_size=256,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  tie_word_embeddings=False,
)


def _small_state(step: int):
  params = {"dense": {"kernel": jnp.full((2, 3), float(step)), "bias": jnp.ones(3)}}
  st = state_lib.create(params, opt_lib.make_optimizer(config_lib.OptimizerConfig()), 0)
  return st.replace(step=jnp.int32(step))


def test_every_nth_step_is_saved_and_kept_for_good(tmp_path):
  """save_every 2, keep_every 5, keep_last 2: step 5 is saved although 2 does not divide it, and
  5 and 10 outlive the rolling window, across a reopen of the directory."""
  cfg = config_lib.CheckpointConfig(
    directory=str(tmp_path / "ck"), save_every=2, keep_last=2, keep_every=5
  )
  with ckpt_lib.Checkpointer(cfg) as ck:
    saved = [s for s in range(1, 13) if ck.save(s, _small_state(s), {"pos": s})]
    ck.wait()
    assert saved == [2, 4, 5, 6, 8, 10, 12]
    assert ck.all_steps() == [5, 10, 12]
  with ckpt_lib.Checkpointer(cfg) as ck:
    for s in range(13, 17):
      ck.save(s, _small_state(s), {"pos": s})
    ck.wait()
    assert ck.all_steps() == [5, 10, 15, 16]  # 14 (saved) left the last-2 window
    state, data, _ = ck.restore(_small_state(0), step=5)
  assert data == {"pos": 5} and float(state.params["dense"]["kernel"][0, 0]) == 5.0
  with pytest.raises(ValueError, match="keep_every"):
    config_lib.CheckpointConfig(keep_every=-1)


def _trained_run(tmp_path, metadata: bool):
  """A tiny Qwen3's train states at steps 1..3 (different params each) in a checkpoint
  directory that keeps them all; -> (directory, model config, params by step)."""
  cfg = registry.preset("qwen3-0.6b", **TINY)
  base = registry.init_params(cfg, jax.random.key(0))
  opt = opt_lib.make_optimizer(config_lib.OptimizerConfig())
  directory = str(tmp_path / "ckpt")
  ck_cfg = config_lib.CheckpointConfig(directory=directory, save_every=1, keep_last=3)
  meta = ckpt_lib.model_metadata(cfg, "qwen3") if metadata else None
  by_step = {}
  with ckpt_lib.Checkpointer(ck_cfg, meta) as ck:
    for step in (1, 2, 3):
      params = jax.tree.map(lambda x, s=step: x + 0.01 * s, base)
      by_step[step] = jax.device_get(params)
      ck.save(step, state_lib.create(params, opt, 0).replace(step=jnp.int32(step)), {})
  return directory, cfg, by_step


def _assert_export_holds(out, cfg, params):
  got_cfg, got = hf_io.load_pretrained(out)
  assert (got_cfg.hidden_size, got_cfg.num_hidden_layers) == (cfg.hidden_size, 2)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_export_of_a_kept_step_from_the_directory_alone(tmp_path):
  directory, cfg, by_step = _trained_run(tmp_path, metadata=True)
  out = export_lib.export_step(directory, 2, str(tmp_path / "hf2"))
  _assert_export_holds(out, cfg, by_step[2])
  assert (out / "tokenizer.json").is_file()  # the metadata's tokenizer family
  transformers = pytest.importorskip("transformers")
  torch = pytest.importorskip("torch")
  model = transformers.AutoModelForCausalLM.from_pretrained(out)
  want = by_step[2]["model"]["embed_tokens"]["embedding"]
  np.testing.assert_array_equal(model.get_input_embeddings().weight.detach().numpy(), want)
  with torch.no_grad():
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, TINY["vocab_size"])
  with pytest.raises(
    ValueError, match=r"step 7 is not a kept checkpoint .* kept steps: \[1, 2, 3\]"
  ):
    export_lib.export_step(directory, 7, str(tmp_path / "hf7"))
  with pytest.raises(FileExistsError):
    export_lib.export_step(directory, 3, str(out))
  assert not (tmp_path / "hf7").exists()


@pytest.mark.slow  # 11 s; export of a kept step stays
def test_export_cli_with_a_job_config(tmp_path):
  """`python3 -m tmax_jax.export --step S --config=...` finds the job's checkpoints
  (<output_dir>/ckpt) and writes <output_dir>/hf-step<S>; a directory without model metadata
  takes the model from the config."""
  run = tmp_path / "run"
  _, cfg, by_step = _trained_run(run, metadata=False)
  config = tmp_path / "job.py"
  config.write_text(
    textwrap.dedent(
      f"""
      from tmax_jax.config_dict import to_config_dict
      from tmax_jax.loop.config import ModelSpec, SFTConfig

      def get_config():
        return to_config_dict(
          SFTConfig(
            model=ModelSpec(preset="qwen3-0.6b", overrides={TINY!r}), output_dir={str(run)!r}
          )
        )
      """
    )
  )
  r = _export_cli("--step", "1", f"--config={config}")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "exported to" in r.stdout
  _assert_export_holds(run / "hf-step1", cfg, by_step[1])
  r = _export_cli("--step", "1", f"--checkpoint_dir={run / 'ckpt'}")
  assert r.returncode != 0 and "--out" in r.stderr


def _export_cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "tmax_jax.export", *args],
    capture_output=True,
    text=True,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    timeout=600,
  )
