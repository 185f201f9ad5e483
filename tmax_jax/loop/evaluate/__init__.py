"""Evaluation runner: a policy x a harness x a directory of tasks, k runs per task.

Policies: `oracle` (the task's solution/solve.sh scripted through the harness), `noop` (submits
without acting), `server` (a model served by tmax_jax.inference at `address`, or `model` (an HF
checkpoint or a preset) served here on 127.0.0.1 for the run), `endpoint` (any OpenAI-compatible
chat endpoint, `endpoint.base_url` + `endpoint.model`: a baseline model, with native tool calls
for the bash-tool harness; endpoint.py). Harnesses: any name in
agents/harnesses.py (`bash_tool`, `mini_swe`, `terminus`). Tasks come from tasks/loader.py
(`task.toml` = TB2/Harbor as is, `task.yaml` = Terminal-Bench 1 converted into
<output_dir>/converted/). Every trial is one episode of agents/worker.EpisodeWorker (the path the
RL loop uses): a fresh sandbox, the harness, then the task's verifier; a trial passes when its
reward >= pass_threshold (1.0: the recipe's binary reward).

Modules: config.py (EvalConfig, EndpointConfig), trials.py (running trials, trial records),
report.py (aggregation, table, results.json), plots.py (the PNG), endpoint.py (policy=endpoint:
client, key, usage), run.py (`evaluate`).

Outputs in `output_dir` (when it holds an earlier run's trials.jsonl or results.json, in the first
free <output_dir>-2, -3, ... instead, unless `overwrite`; results' config.output_dir says which):
  trials.jsonl        one trial record per line, appended as trials finish
  results.json        the full results (schema below), written atomically at the end
  categories.txt      the per-category table (also printed)
  pass_at_1.png       bar chart of pass@1 per category (and overall) with stderr error bars
  trials/<task>/<run>/  each trial's artifacts (tasks/artifacts.py; task names with "_" for
                      characters a path must not hold), written atomically as the trial ends:
    verifier/         every file the tests left in /logs/verifier (test-stdout.txt, reward.json
                      or reward.txt, a report such as ctrf.json or junit xml); each file keeps at
                      most 1 MiB, its tail, under a "[tmax_jax: truncated ...]" line; at most 64
                      files (verifier.skipped.txt names the rest)
    packages.start.txt, packages.after_tests.txt: `dpkg-query -W` and `python3 -m pip freeze
                      --all` (each under a "# <command>" line; a failure is written instead) in the
                      sandbox as started (before the agent acted) and after test.sh ran (which
                      often installs pytest), for comparing two evaluations' environments
  runner.packages_before (an ISO date) makes the tests' installs resolve against packages
  uploaded before it (UV_EXCLUDE_NEWER, PIP_UPLOADED_PRIOR_TO: tasks/runner.py verifier_env).

results.json schema (schema_version 1):
  schema_version: 1
  config:         the EvalConfig as a dict
  started_at, finished_at: ISO-8601 UTC; wall_time_s: float
  aggregate:
    num_tasks, num_trials (the tasks with a scored trial, the scored trials), runs_per_task (k),
    pass_threshold
    pass@1: {mean, stderr}   mean over tasks of the per-task pass rate over its scored trials;
                             stderr = sample std of the per-task rates / sqrt(num_tasks) (0 for
                             one task); both null when no trial was scored
    pass@k: {"<k>": mean unbiased pass@k over tasks} for each k in pass_ks up to the fewest scored
            trials of a task
    mean_reward (null when no trial was scored)
    num_errors: trials that errored (status error, no_episode, build_failed: the infrastructure
                or the setup failed, no verdict on the policy): never scored, left out of every
                number here; error_share: num_errors / (num_errors + num_trials);
                error_reasons: [{reason, trials}] the most frequent 3 (error or reward_reason)
    unsupported_tasks: [task] whose trials raised TaskUnsupportedError (e.g. multi-service
                       compose); they are left out of every number above and below but the
                       status counts (num_tasks, num_trials, pass@1, categories, tasks)
    status_counts: {episode status: count} over all trials
    mean_turns, mean_tool_calls, mean_response_tokens, mean_duration_s
    usage: {requests, prompt_tokens, completion_tokens, cost_usd} summed over every trial (errored
           ones included: they were paid for); null unless policy=endpoint; cost_usd null
           without endpoint.price_per_mtok_in/out
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
              build; [] when none matched: then the task's own build step failed), usage
              (policy=endpoint: {requests, prompt_tokens, completion_tokens: the endpoint's
              `usage` counts over the trial's requests, cost_usd: at the configured prices, null
              when unpriced}; null for other policies). response_tokens counts the reply in
              episode.family's tokenizer (the trajectory), completion_tokens the endpoint's own.
              verifier_dir: the trial's verifier/ directory relative to output_dir (null when no
              verifier ran); packages: {start, after_tests: package list files relative to
              output_dir, each present when taken} or null when none was.
"""

from tmax_jax.loop.evaluate.config import POLICIES, EndpointConfig, EvalConfig
from tmax_jax.loop.evaluate.endpoint import usage_record
from tmax_jax.loop.evaluate.plots import plot_categories
from tmax_jax.loop.evaluate.report import (
  SCHEMA_VERSION,
  aggregate,
  category_table,
  check_measured,
  config_dict,
  mean_stderr,
  summary_text,
  total_usage,
)
from tmax_jax.loop.evaluate.run import evaluate
from tmax_jax.loop.evaluate.trials import UNCATEGORIZED, category, run_trials, trial_record

__all__ = [
  "POLICIES",
  "SCHEMA_VERSION",
  "UNCATEGORIZED",
  "EndpointConfig",
  "EvalConfig",
  "aggregate",
  "category",
  "category_table",
  "check_measured",
  "evaluate",
  "mean_stderr",
  "plot_categories",
  "run_trials",
  "summary_text",
  "trial_record",
  "config_dict",
  "total_usage",
  "usage_record",
  "report",  # public module: the report's schema and tables, shared with math_eval
]
