"""The HF export of any kept checkpoint step (CheckpointConfig.keep_last / keep_every).

  python3 -m tmax_jax.export --step S --config=configs/X.py [--config.output_dir=D] [--out=DIR]
  python3 -m tmax_jax.export --step S --checkpoint_dir=DIR --out=OUT

Step S's params are read from the Orbax checkpoint into host memory, without the optimizer state
(train/checkpoint.read_params), and written by models/hf_io.save_pretrained: a hidden temp
directory renamed into place when complete, so a killed export leaves no half-written OUT. The
model comes from the checkpoint directory's metadata (the job writes it with its first
checkpoint); with --config and a directory without it, from the config's `model`. --config finds
the checkpoints where the job put them (train.checkpoint.directory, else <output_dir>/ckpt) and
defaults --out to <output_dir>/hf-step<S>. Single process; any machine with the host memory for
the params (fp32: 4 bytes per parameter).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli, errors, jobs
from tmax_jax.loop import RLConfig, SFTConfig, checkpoint_config, policy, with_family
from tmax_jax.models import ModelConfig, hf_io
from tmax_jax.tokenizers import tokenizer_dir
from tmax_jax.train import checkpoint as ckpt_lib


def export_step(
  checkpoint_dir: str,
  step: int,
  out: str,
  *,
  fallback: Callable[[], tuple[ModelConfig, str]] | None = None,
  overwrite: bool = False,
) -> pathlib.Path:
  """Writes the HF checkpoint of kept step `step` of `checkpoint_dir` to `out`, the model as the
  directory's metadata names it, else as `fallback()` -> (ModelConfig, tokenizer family) does."""
  params, meta = ckpt_lib.read_params(checkpoint_dir, step)
  if meta.get("hf_config"):
    model_cfg, tokenizer_family = ckpt_lib.model_from_metadata(meta), meta["tokenizer_family"]
  elif fallback is not None:
    model_cfg, tokenizer_family = fallback()
  else:
    raise errors.UserError(
      f"{checkpoint_dir} holds no model metadata (written before checkpoints recorded it); "
      "pass --config=<the job's config> to take the model from it"
    )
  tokenizer = tokenizer_dir(tokenizer_family) if tokenizer_family else None
  return hf_io.save_pretrained(out, params, model_cfg, tokenizer_dir=tokenizer, overwrite=overwrite)


def export_job_step(config_dict, step: int, out: str = "", overwrite: bool = False) -> pathlib.Path:
  """export_step for the job a configs/*.py describes: its checkpoint directory, its model as the
  fallback, out default <output_dir>/hf-step<step>."""
  job = jobs.job_config(config_dict)
  if not isinstance(job, (RLConfig, SFTConfig)):
    raise errors.ConfigError(
      f"--config: checkpoints are written by RL and SFT jobs, not by a {type(job).__name__}"
    )

  def from_job() -> tuple[ModelConfig, str]:
    model_cfg = policy.model_config(job.model)
    return model_cfg, with_family(job.episode, model_cfg.model_type).family

  return export_step(
    checkpoint_config(job.train.checkpoint, job.output_dir).directory,
    step,
    out or str(pathlib.Path(job.output_dir) / f"hf-step{step}"),
    fallback=from_job,
    overwrite=overwrite,
  )


def main(argv) -> None:
  del argv
  f = flags.FLAGS
  if (f.config is None) == (not f.checkpoint_dir):
    raise errors.UserError("give exactly one of --config=<job config> and --checkpoint_dir=<dir>")
  if f.config is not None:
    out = export_job_step(f.config, f.step, f.out, f.overwrite)
  else:
    if not f.out:
      raise errors.UserError("--checkpoint_dir needs --out=<export directory>")
    out = export_step(f.checkpoint_dir, f.step, f.out, overwrite=f.overwrite)
  print(f"step {f.step} exported to {out}")


if __name__ == "__main__":
  from absl import flags as absl_flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file("config", None, "job config (configs/*.py)", lock_config=True)
  absl_flags.DEFINE_integer("step", None, "the kept checkpoint step to export")
  absl_flags.DEFINE_string("checkpoint_dir", "", "a checkpoint directory (instead of --config)")
  absl_flags.DEFINE_string(
    "out", "", "export directory (--config: default <output_dir>/hf-step<S>)"
  )
  absl_flags.DEFINE_bool("overwrite", False, "replace an existing export directory")
  absl_flags.mark_flags_as_required(["step"])
  cli.run_absl(main)
