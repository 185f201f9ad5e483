"""Evaluate a policy on a directory of TB1/TB2 tasks: pass@1 mean +- stderr, pass@k, a per-category
table, results.json (schema in tmax_jax/loop/evaluate/__init__.py), trials.jsonl and a PNG plot.

python3 launch/eval.py --config=configs/eval_oracle.py --config.tasks_dir=/tasks \
    --config.output_dir=runs/eval_oracle
python3 launch/eval.py --config=configs/eval_server.py --config.address=127.0.0.1:9000 \
    --config.tasks_dir=/tasks --config.output_dir=runs/eval --config.runs_per_task=4
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "eval config (configs/eval_*.py)", lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax.config_dict import from_config_dict
  from tmax_jax.loop.evaluate import EvalConfig, evaluate, summary_text
  from tmax_jax.loop.preflight import check_inputs

  cfg = from_config_dict(EvalConfig, _CONFIG.value)
  check_inputs(cfg)
  results = evaluate(cfg)
  print(summary_text(results), end="")
  print(f"results: {cfg.output_dir}/results.json")


if __name__ == "__main__":
  cli.run_absl(main)
