"""AIME-style math evaluation of a served model: pass@1 mean +- stderr over the problems of a
problem file (JSONL or parquet with `problem` and `answer`), pass@k, records.jsonl and results.json
(schema in tmax_jax/loop/math_eval/__init__.py). Exits 2 (`error: ...`) when no sample was scored
or more than config.max_error_share errored; an output_dir holding an earlier run's results is kept
(this run writes to <output_dir>-2, ...) unless --config.overwrite.

python3 launch/math_eval.py --config=configs/eval_aime.py --config.problems=aime.jsonl \\
    --config.address=127.0.0.1:9000 --config.family=qwen3_5 --config.output_dir=runs/aime
python3 launch/math_eval.py --config=configs/eval_aime.py --config.problems=aime.jsonl \\
    --config.address='' --config.family='' --config.model.checkpoint=/ckpt/hf
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config",
  None,
  cli.config_help("math eval config (configs/eval_aime.py)", "math_eval"),
  lock_config=True,
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.loop.math_eval import check_measured, evaluate_math, summary_text

  cfg = jobs.resolve(_CONFIG.value, "math_eval")
  results = evaluate_math(cfg)
  print(summary_text(results), end="")
  print(f"results: {results['config']['output_dir']}/results.json")
  check_measured(results)


if __name__ == "__main__":
  cli.run_absl(main)
