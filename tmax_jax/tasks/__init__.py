"""Terminal tasks: the TB2/Harbor format, TB1 conversion, the runner, verifiers and generators.

Public API:
  format:      Task, TaskConfig, TaskFormatError, load_task, write_task, validate_task
  tb1:         convert_tb1 (Terminal-Bench 1 task directory -> Task)
  runner:      RunnerConfig, RunResult, run_oracle, run_noop, run_script, run_trial, verify,
               RewardMissingError, RewardFormatError
  verifiers:   exact_text, metric_threshold, adversarial_corpus, fuzz_equivalence, multi_protocol
  generator/:  the 9-axis sampler, the taxonomy data, the LLM task writer
  difficulty:  pass@k, soft filter, 13-gram decontamination
"""

from tmax_jax.tasks.format import (
  Task,
  TaskConfig,
  TaskFormatError,
  load_task,
  validate_task,
  write_task,
)
from tmax_jax.tasks.runner import (
  RewardFormatError,
  RewardMissingError,
  RunnerConfig,
  RunResult,
  run_noop,
  run_oracle,
  run_script,
  run_trial,
  verify,
)

__all__ = [
  "Task",
  "TaskConfig",
  "TaskFormatError",
  "load_task",
  "validate_task",
  "write_task",
  "RewardFormatError",
  "RewardMissingError",
  "RunnerConfig",
  "RunResult",
  "run_noop",
  "run_oracle",
  "run_script",
  "run_trial",
  "verify",
]
