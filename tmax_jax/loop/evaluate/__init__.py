"""Evaluation runner: a policy x a harness x a directory of tasks, k runs per task.

Policies: `oracle` (the task's solution/solve.sh scripted through the harness), `noop` (submits
without acting), `server` (a model served by tmax_jax.inference at `address`, or `model` (an HF
checkpoint or a preset) served here on 127.0.0.1 for the run). Harnesses: any name in
agents/harnesses.py (`bash_tool`, `mini_swe`, `terminus`). Tasks come from tasks/loader.py
(`task.toml` = TB2/Harbor as is, `task.yaml` = Terminal-Bench 1 converted into
<output_dir>/converted/). Every trial is one episode of agents/worker.EpisodeWorker (the path the
RL loop uses): a fresh sandbox, the harness, then the task's verifier; a trial passes when its
reward >= pass_threshold (1.0: the recipe's binary reward).

Modules: config.py (EvalConfig), trials.py (running trials, trial records), report.py
(aggregation, table, results.json), plots.py (the PNG), run.py (`evaluate`).

Outputs in `output_dir`:
  trials.jsonl        one trial record per line, appended as trials finish
  results.json        the full results (schema below), written atomically at the end
  categories.txt      the per-category table (also printed)
  pass_at_1.png       bar chart of pass@1 per category (and overall) with stderr error bars

results.json schema (schema_version 1):
  schema_version: 1
  config:         the EvalConfig as a dict
  started_at, finished_at: ISO-8601 UTC; wall_time_s: float
  aggregate:
    num_tasks, num_trials, runs_per_task (k), pass_threshold
    pass@1: {mean, stderr}   mean over tasks of the per-task pass rate; stderr = sample std of the
                             per-task rates / sqrt(num_tasks) (0 for one task)
    pass@k: {"<k>": mean unbiased pass@k over tasks} for each k in pass_ks up to runs_per_task
    mean_reward, num_errors (trials that raised instead of being scored; they count as reward 0)
    unsupported_tasks: [task] whose trials raised TaskUnsupportedError (e.g. multi-service
                       compose); they are left out of every number above and below but the
                       status counts (num_tasks, num_trials, pass@1, categories, tasks)
    status_counts: {episode status: count} over all trials
    mean_turns, mean_tool_calls, mean_response_tokens, mean_duration_s
  categories: {category: {num_tasks, num_trials, pass@1, stderr, mean_reward}}
              (category = task.toml [metadata].category, "uncategorized" when absent)
  tasks:      {task: {category, num_trials, num_passed, mean_reward, pass@1, "pass@<k>"...}}
  trials:     [trial record] with
              task, category, run (0-based index), reward (float in [0, 1]), passed (bool),
              reward_reason (the runner's reason: "ok", verifier_timeout, build_failed: ...,
              or the episode status that zeroed it), status (episode status: submitted |
              max_tool_calls | max_turns | max_response_tokens | wall_time | oom | sandbox_crash |
              no_episode | build_failed | error | unsupported), turns, tool_calls,
              format_errors, response_tokens, duration_s, error (null, or the exception text for
              status "error" / "unsupported"), deviations (for build_failed: the ids of the
              stand-in base's known deviations that can explain the failure, from
              sandbox/bases/deviations.toml, "base-build" when the stand-in itself did not
              build; [] when none matched: then the task's own build step failed)
"""

from tmax_jax.loop.evaluate.config import POLICIES, EvalConfig
from tmax_jax.loop.evaluate.plots import plot_categories
from tmax_jax.loop.evaluate.report import (
  SCHEMA_VERSION,
  aggregate,
  category_table,
  mean_stderr,
  summary_text,
)
from tmax_jax.loop.evaluate.run import evaluate
from tmax_jax.loop.evaluate.trials import UNCATEGORIZED, category, run_trials, trial_record

__all__ = [
  "POLICIES",
  "SCHEMA_VERSION",
  "UNCATEGORIZED",
  "EvalConfig",
  "aggregate",
  "category",
  "category_table",
  "evaluate",
  "mean_stderr",
  "plot_categories",
  "run_trials",
  "summary_text",
  "trial_record",
]
