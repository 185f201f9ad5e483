"""Terminal tasks: the TB2/Harbor format, TB1 conversion, the runner, verifiers and generators.

Public API:
  format:      Task, TaskConfig, TaskFormatError, load_task, write_task, validate_task
  tb1:         convert_tb1 (Terminal-Bench 1 task directory -> Task)
  runner:      RunnerConfig, RunResult, run_oracle, run_noop, run_script, run_trial, verify,
               RewardMissingError, RewardFormatError
  verifiers:   exact_text, metric_threshold, adversarial_corpus, fuzz_equivalence, multi_protocol
  generator/:  the 9-axis sampler, the taxonomy data, the LLM task writer
  difficulty:  pass@k, soft filter, 13-gram decontamination

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.tasks`, import the names
below from here, and the public modules listed in `__all__` whole (verifiers/ has a face of its
own; generator/ and procedural/ are public whole until move 1 splits tasks/ by job and gives each
part its face); generate_axes, generate_llm and tmax15k are internal.
"""

from tmax_jax.tasks.format import (
  AgentConfig,
  EnvironmentConfig,
  Task,
  TaskConfig,
  TaskFormatError,
  TaskInfo,
  VerifierConfig,
  load_task,
  validate_task,
  write_task,
)
from tmax_jax.tasks.runner import (
  BUILD_FAILED,
  RewardFormatError,
  RewardMissingError,
  RunnerConfig,
  RunResult,
  TaskUnsupportedError,
  run_noop,
  run_oracle,
  run_script,
  run_trial,
  verify,
)

__all__ = [
  # the task as data
  "AgentConfig",
  "EnvironmentConfig",
  "Task",
  "TaskConfig",
  "TaskFormatError",
  "TaskInfo",
  "VerifierConfig",
  "load_task",
  "validate_task",
  "write_task",
  # running one
  "BUILD_FAILED",
  "RewardFormatError",
  "RewardMissingError",
  "RunnerConfig",
  "RunResult",
  "TaskUnsupportedError",
  "run_noop",
  "run_oracle",
  "run_script",
  "run_trial",
  "verify",
  # public modules, used whole
  "artifacts",  # a trial's verifier files and resolved packages, for comparing runs
  "compose",  # a task's multi-service compose file
  "difficulty",  # pass@k, soft filter, decontamination
  "environment",  # a task's environment -> a sandbox spec / image
  "format",  # the TB2/Harbor task format
  "loader",  # task directories of either format
  "runner",  # the trial runner
  "sources",  # where a job's tasks come from (TaskSource)
  "tb1",  # Terminal-Bench 1 conversion
  "vocabulary",  # domains, verifier kinds, fixtures and complexities, defined once
  # packages: verifiers/ with its own face; generator/ and procedural/ public whole
  "generator",
  "procedural",
  "verifiers",
]
