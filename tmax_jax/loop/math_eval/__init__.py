"""Math evaluation (the paper's AIME check that terminal RL does not cost math ability): a
non-agentic eval through the same inference server the RL loop and launch/eval.py use.

Every problem of a problem file (JSONL or parquet, `problem` and `answer` fields; problems.py) is
put into the prompt template as one user turn of the model family's chat template, sampled k times
(samples_per_problem) with the config's sampling (the recipe's T = 1, no top-p/k, 16384 tokens), and
a sample is correct when the last `\\boxed{...}` after its reasoning equals the gold answer after
normalisation (answers.py). pass@1 of a problem is c / n over its n scored samples (the unbiased
pass@1); the reported pass@1 is its mean over problems +- the standard error; pass@k likewise with
the unbiased estimator.

Modules: answers.py (extraction, normalisation), problems.py (the problem file), config.py
(MathEvalConfig), report.py (aggregation, summary, verdict), run.py (`evaluate_math`).

Outputs in `output_dir` (when it holds an earlier run's records.jsonl or results.json, in the first
free <output_dir>-2, -3, ... instead, unless `overwrite`; results' config.output_dir says which):
  records.jsonl  one record per problem: appended as problems finish, rewritten in file order at
                 the end: id, problem, answer (the gold answer as written), num_samples and
                 num_correct (scored samples), num_errors, pass@1 (null when none was scored),
                 "pass@<k>" for 1 < k <= num_samples, samples: [{sample (0-based), status (scored
                 | error), extracted (the normalised boxed answer or null), correct, finish_reason
                 (stop | length), response_tokens, response (the decoded completion), error (null,
                 or why the sample was not scored)}]
  results.json   written atomically at the end (schema_version 1):
    config: the MathEvalConfig as a dict; started_at, finished_at (ISO-8601 UTC), wall_time_s
    aggregate:
      num_problems, num_samples (problems with a scored sample, scored samples),
      samples_per_problem (k), pass@1: {mean, stderr} (mean over problems of c / n; stderr =
      sample std / sqrt(num_problems), 0 for one; null when nothing was scored),
      pass@k: {"<k>": mean unbiased pass@k} for each k in pass_ks up to the fewest scored samples
      of a problem, unscored_problems: [id], num_errors, error_share, error_reasons: [{reason,
      samples}] (the 3 most frequent), answered_share (scored samples with a boxed answer),
      truncated_share (scored samples that hit max_tokens), finish_reasons: {reason: count},
      mean_response_tokens
    problems: {id: the record without its problem text and samples}
"""

from tmax_jax.loop.math_eval.answers import extract_answer, is_aime_answer, last_boxed, normalize
from tmax_jax.loop.math_eval.config import DEFAULT_PROMPT, MathEvalConfig
from tmax_jax.loop.math_eval.problems import Fields, Problem, load_problems
from tmax_jax.loop.math_eval.report import SCHEMA_VERSION, aggregate, check_measured, summary_text
from tmax_jax.loop.math_eval.run import evaluate_math, render_prompt, score_reply

__all__ = [
  "DEFAULT_PROMPT",
  "SCHEMA_VERSION",
  "Fields",
  "MathEvalConfig",
  "Problem",
  "aggregate",
  "check_measured",
  "evaluate_math",
  "extract_answer",
  "is_aime_answer",
  "last_boxed",
  "load_problems",
  "normalize",
  "render_prompt",
  "score_reply",
  "summary_text",
]
