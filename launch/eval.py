"""Evaluate a policy on a directory of TB1/TB2 tasks: pass@1 mean +- stderr, pass@k, a per-category
table, results.json (schema in tmax_jax/loop/evaluate/__init__.py), trials.jsonl and a PNG plot.
Exits 2 (`error: ...`) when no trial was scored or more than config.max_error_share errored; an
output_dir holding an earlier run's results is kept (this run writes to <output_dir>-2, ...)
unless --config.overwrite.

python3 launch/eval.py --config=configs/eval_oracle.py --config.tasks_dir=/tasks \\
    --config.output_dir=runs/eval_oracle
python3 launch/eval.py --config=configs/eval_server.py --config.address=127.0.0.1:9000 \\
    --config.tasks_dir=/tasks --config.output_dir=runs/eval --config.runs_per_task=4
python3 launch/eval.py --config=configs/eval_endpoint.py --config.endpoint.base_url=URL \\
    --config.endpoint.model=NAME --config.tasks_dir=/tasks --config.output_dir=runs/eval_NAME
    (any OpenAI-compatible endpoint; the key from $OPENAI_API_KEY: --config.endpoint.api_key_env)
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, cli.config_help("eval config (configs/eval_*.py)", "eval"), lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.loop.evaluate import check_measured, evaluate, summary_text

  cfg = jobs.resolve(_CONFIG.value, "eval")
  results = evaluate(cfg)
  print(summary_text(results), end="")
  print(f"results: {results['config']['output_dir']}/results.json")
  check_measured(results)


if __name__ == "__main__":
  cli.run_absl(main)
