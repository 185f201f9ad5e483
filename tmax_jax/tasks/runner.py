"""Runs a task's oracle and verifier in a sandbox and reads the reward (Harbor's protocol).

A trial: start a sandbox from the task environment -> let an "agent" act (nothing, the oracle
/solution/solve.sh, any solve script, or a callback) -> upload /tests -> run
`(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1` under the verifier timeout -> read
/logs/verifier/reward.json (flat dict of numbers) else reward.txt (one float, clamped to [0, 1]).
A missing or empty reward file raises RewardMissingError; it is never read as a zero. An OOM of
the solution or of the tests, or the tests' timeout, is reward 0 with the reason recorded (the
tests run what the agent left). A failure of the infrastructure is never a reward: the result's
`failure` names its kind (INFRA_FAILURES) and its reward means nothing (docs/design/episodes.md
"Scoring").
A task whose docker-compose.yaml has several services runs as a podman pod (tasks/compose.py,
sandbox/pod.py): the agent and the verifier in the main service, the others next to it; off
podman it raises TaskUnsupportedError (reported, never a zero).
With artifacts=True a trial also keeps its verifier's files and the packages its sandbox resolved
(tasks/artifacts.py); RunnerConfig.packages_before dates the tests' package installs.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import json
import math
import pathlib
import re
import shlex
import time
from collections.abc import Callable, Mapping

from tmax_jax.errors import UserError
from tmax_jax.sandbox import (
  BACKENDS,
  CommandResult,
  Limits,
  PodSpec,
  Sandbox,
  SandboxError,
  open_pod,
  open_sandbox,
  pod_unsupported,
  runtime,
)
from tmax_jax.sandbox.images.dockerfile import DockerfileError
from tmax_jax.tasks import artifacts as artifacts_lib
from tmax_jax.tasks import compose as compose_lib
from tmax_jax.tasks import environment as envlib
from tmax_jax.tasks.format import Files, Task, TaskFormatError, write_task

VERIFIER_LOGS = "/logs/verifier"
ORACLE_COMMAND = "(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1"
TEST_COMMAND = "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1"
LOG_CHARS = 20_000
# The solution's output goes to oracle.txt, so the sandbox cannot see an allocation failure in it.
_OOM_RE = re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")


# The kinds of infrastructure failure a trial can end in (RunResult.failure; the RL loop's
# `kind` of a dropped episode): never scored.
INFRA_FAILURES = {
  "build_failed": "the task's environment did not build",
  "sandbox_start": "the sandbox did not start",
  "sandbox_lost": "the sandbox stopped working under the trial (shell or container died, killed "
  "from outside, hard lifetime ran out, a sandbox call failed)",
  "verifier_error": "the verifier wrote no reward or an unreadable one",
}


class RewardError(RuntimeError):
  """The verifier ran but its reward could not be read (infrastructure: the task's tests are
  broken, not the policy's answer)."""

  kind = "verifier_error"
  sandbox = ""  # the sandbox the verifier ran in (set by run_trial)
  artifacts: Mapping[str, str] = {}  # the trial's artifacts (run_trial(artifacts=True))

  def __init__(self, message: str, logs: Mapping[str, str] | None = None):
    super().__init__(message)
    self.logs = dict(logs or {})


class TaskUnsupportedError(RuntimeError):
  """The task needs something this backend or host does not provide (a multi-service compose
  file off podman, a compose feature pods cannot honour): reported as unsupported with this
  reason, never scored as a zero."""


class RewardMissingError(RewardError):
  """Neither reward.json nor reward.txt exists (or both are empty): a broken verifier, not a 0."""


class RewardFormatError(RewardError):
  """A reward file exists but does not hold a float / a flat dict of numbers."""


# RunnerConfig.sandbox_hosts: the module whose `open_hosted(spec, backend)` opens a trial's
# sandbox on a sandbox host, imported by name on first use (it sits above this module, on Ray).
SANDBOX_HOSTS = {"ray": "tmax_jax.cluster.sandbox_hosts"}


@dataclasses.dataclass(frozen=True)
class RunnerConfig:
  """How trials run. image None -> the task's own image, built from its Dockerfile (cached by
  layer hash; tasks/environment.built_spec); an image (rootfs dir / podman image) -> the
  Dockerfile translated onto it (environment.environment_spec). backend: one of ours
  (sandbox.BACKENDS, None = auto) or "harbor:<type>", a Harbor environment (harbor/sandbox.py)."""

  backend: str | None = None  # None or "" = auto (tmax_jax.sandbox.resolve_backend)
  # None: the task's own image; else a base rootfs/podman image the Dockerfile is translated onto
  image: str | None = None
  memory_mb: int | None = 4096  # sandbox memory limit (None = the task's; recipe: 4096)
  enforce_limits: bool = True  # False: run without per-sandbox cgroups (a warning per trial)
  # Harbor's --timeout-multiplier: scales the agent's and the verifier's time limits of every task
  # (agent_timeout_s, verifier_timeout_s), e.g. for slower hardware than the benchmark's.
  timeout_multiplier: float = 1.0
  # Tests run under max(task's verifier timeout_sec x multiplier, this). The recipe's RL rule is
  # 600 s; 0 = exactly the task's (Terminal-Bench 2.0's protocol: evaluation's default).
  min_verifier_timeout_s: float = 600.0
  allow_network: bool = False  # give sandboxes a network (off: loopback only)
  verifier_in_shell: bool = False  # run test.sh in the persistent shell instead of a fresh process
  sandbox_lifetime_s: int = Limits.lifetime_s  # each sandbox's hard lifetime (api.Limits)
  # An ISO date or datetime (naive = UTC), e.g. a benchmark's release date: the tests' package
  # installs resolve against uploads before it (verifier_env: UV_EXCLUDE_NEWER for uv/uvx,
  # PIP_UPLOADED_PRIOR_TO for pip >= 26.0; older pips ignore it). "release" = each task's
  # benchmark's (BENCHMARK_RELEASES, by the task's source format). "" = the newest.
  packages_before: str = ""
  # Where the sandboxes run: "" = this process opens them (single host, as always); "ray" = on
  # the Ray cluster's `sandbox` nodes, one sandbox host each, leased least-loaded
  # (tmax_jax/cluster/sandbox_hosts.py; launch/cluster.py places the hosts).
  sandbox_hosts: str = ""
  # Leasing on the sandbox hosts (sandbox_hosts set; cluster/leases.LeasePolicy):
  host_max_starting: int = 4  # sandboxes one host may be starting at once
  host_cooldown_s: float = 300.0  # how long a failed host takes none (the paper's 300 s)
  host_lease_wait_s: float = 600.0  # how long an open waits for a host before it fails

  def __post_init__(self):
    known = self.backend in (None, "", "auto", *BACKENDS) or self.backend.startswith("harbor:")
    if not known:  # before any task builds (a job config, or a tool's --backend)
      raise UserError(
        f"backend={self.backend!r}: not a sandbox backend; expected auto, "
        f"{', '.join(BACKENDS)} or harbor:<environment type>"
      )
    if self.sandbox_hosts not in ("", *SANDBOX_HOSTS):
      raise UserError(
        f"RunnerConfig.sandbox_hosts={self.sandbox_hosts!r}; expected '' (this process's "
        f"sandboxes) or one of {sorted(SANDBOX_HOSTS)}"
      )
    if self.host_max_starting < 1 or self.host_cooldown_s < 0 or self.host_lease_wait_s < 0:
      raise UserError(
        f"RunnerConfig.host_max_starting={self.host_max_starting}, host_cooldown_s="
        f"{self.host_cooldown_s}, host_lease_wait_s={self.host_lease_wait_s}; expected >= 1, "
        ">= 0 and >= 0"
      )
    if self.sandbox_hosts and ":" in (self.backend or ""):
      raise UserError(
        f"RunnerConfig.sandbox_hosts={self.sandbox_hosts!r} runs our own backends on the hosts; "
        f"backend={self.backend!r} is another provider's"
      )
    if not self.timeout_multiplier > 0:
      raise ValueError(f"RunnerConfig.timeout_multiplier={self.timeout_multiplier}; expected > 0")
    if self.min_verifier_timeout_s < 0:
      raise ValueError(
        f"RunnerConfig.min_verifier_timeout_s={self.min_verifier_timeout_s}; expected >= 0"
      )
    if self.packages_before and self.packages_before != RELEASE:
      packages_cutoff(self.packages_before)  # a date that does not parse fails here


# packages_before="release": the first day of each benchmark's release month (May 2025 and
# November 2025; the exact days are not confirmed here, and the month's first day is never later
# than the release), by the task's metadata.source_format (tasks/tb1.py sets terminal-bench-1;
# Harbor-format tasks, TB2's and ours, have none).
RELEASE = "release"
BENCHMARK_RELEASES = {"terminal-bench-1": "2025-05-01", "terminal-bench-2": "2025-11-01"}


def release_date(task: Task) -> str:
  """The release date (ISO) of the benchmark `task` comes from (TB2's for Harbor-format tasks)."""
  return BENCHMARK_RELEASES[task.config.metadata.get("source_format", "terminal-bench-2")]


def packages_cutoff(value: str) -> str:
  """RunnerConfig.packages_before as an RFC 3339 UTC timestamp ("2025-11-07" ->
  "2025-11-07T00:00:00Z"): the one form both uv and pip read the same on every host."""
  try:
    when = datetime.datetime.fromisoformat(value)
  except ValueError:
    raise ValueError(
      f"RunnerConfig.packages_before={value!r}: expected an ISO date (2025-11-07) or datetime"
    ) from None
  if when.tzinfo is not None:
    when = when.astimezone(datetime.UTC).replace(tzinfo=None)
  return when.isoformat(timespec="seconds") + "Z"


def task_cutoff(task: Task, config: RunnerConfig = RunnerConfig()) -> str:
  """RunnerConfig.packages_before for `task` as an RFC 3339 timestamp ("" = the newest)."""
  before = config.packages_before
  if not before:
    return ""
  return packages_cutoff(release_date(task) if before == RELEASE else before)


def verifier_env(task: Task, config: RunnerConfig = RunnerConfig()) -> dict[str, str]:
  """The environment test.sh runs with: packages_before's cutoff for uv and pip, then the task's
  own [verifier.env] (which wins)."""
  cutoff = task_cutoff(task, config)
  env = {"UV_EXCLUDE_NEWER": cutoff, "PIP_UPLOADED_PRIOR_TO": cutoff} if cutoff else {}
  return {**env, **task.config.verifier.env}


def agent_timeout_s(
  task: Task, config: RunnerConfig = RunnerConfig(), budget_s: float = 0.0
) -> float:
  """The agent's time limit in a trial of `task` (seconds): `budget_s` when > 0 (one budget for
  every task: the RL episode's wall time, TerminalHorizon's 3 hours; Harbor's
  agent.override_timeout_sec), else the task's own [agent] timeout_sec (Terminal-Bench 2.0's
  protocol; the format's 600 s when task.toml names none, as Harbor's), x timeout_multiplier
  (which Harbor applies to an override too). The oracle runs under it as well."""
  return (budget_s or task.config.agent.timeout_sec) * config.timeout_multiplier


def verifier_timeout_s(task: Task, config: RunnerConfig = RunnerConfig()) -> float:
  """The tests' time limit in a trial of `task` (seconds): its [verifier] timeout_sec x
  timeout_multiplier, raised to min_verifier_timeout_s (the recipe's RL rule, max(task, 600 s);
  0 in evaluation, where the benchmark's own value is the protocol)."""
  scaled = task.config.verifier.timeout_sec * config.timeout_multiplier
  return max(scaled, config.min_verifier_timeout_s)


# RunResult.reason prefix of an environment that did not build (the error follows; a failure that
# a known deviation of the stand-in base explains starts "[stand-in deviation: <ids>]", see
# sandbox/bases.py attribute_failure).
BUILD_FAILED = "build_failed"


@dataclasses.dataclass(frozen=True)
class RunResult:
  """reward in [0, 1]; rewards: the full reward.json (or {"reward": r}); reason "ok" or why 0.
  failure: "" for a scored trial, else its INFRA_FAILURES kind (reward is then 0 and means
  nothing: never use it as a score). sandbox: the sandbox's name; verified_at: the wall time
  (time.time) the reward was read (0 when none was). artifacts: {name: text} with
  run_trial(artifacts=True) (tasks/artifacts.py), else empty."""

  reward: float
  rewards: Mapping[str, float]
  reason: str
  logs: Mapping[str, str]
  duration_s: float = 0.0
  failure: str = ""
  sandbox: str = ""
  verified_at: float = 0.0
  artifacts: Mapping[str, str] = dataclasses.field(default_factory=dict)


def infra_result(kind: str, reason: str, logs: Mapping[str, str], sandbox: str = "") -> RunResult:
  """The RunResult of a trial that ended in an infrastructure failure of `kind`."""
  if kind not in INFRA_FAILURES:
    raise ValueError(f"unknown infrastructure failure {kind!r}; expected one of {INFRA_FAILURES}")
  return RunResult(0.0, {}, reason, logs, failure=kind, sandbox=sandbox)


# ----------------------------------------------------------------------------------------------
# reward files


def parse_reward_json(text: str, file: str = "reward.json") -> dict[str, float]:
  """A flat JSON dict of numbers (bools are not numbers); must contain at least one entry."""
  try:
    data = json.loads(text)
  except json.JSONDecodeError as err:
    raise RewardFormatError(f"{file}: not valid JSON ({err})") from None
  if not isinstance(data, dict) or not data:
    raise RewardFormatError(
      f"{file}: expected a non-empty flat dict of numbers, got {text.strip()[:200]!r}"
    )
  out = {}
  for k, v in data.items():
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
      raise RewardFormatError(f"{file}: {k}: expected a finite number, got {v!r}")
    out[str(k)] = float(v)
  return out


def parse_reward_txt(text: str, file: str = "reward.txt") -> float:
  try:
    value = float(text.strip())
  except ValueError:
    raise RewardFormatError(f"{file}: expected one float, got {text.strip()[:200]!r}") from None
  if not math.isfinite(value):
    raise RewardFormatError(f"{file}: expected a finite float, got {text.strip()!r}")
  return value


def scalar_reward(rewards: Mapping[str, float], file: str = "reward.json") -> float:
  """The trial's reward: the "reward" key, else the only key; clamped to [0, 1]."""
  if "reward" in rewards:
    value = rewards["reward"]
  elif len(rewards) == 1:
    value = next(iter(rewards.values()))
  else:
    raise RewardFormatError(f"{file}: several keys {sorted(rewards)} and no 'reward' key")
  return min(1.0, max(0.0, value))


def read_reward_dir(
  directory: str | pathlib.Path, logs: Mapping[str, str] | None = None
) -> tuple[float, dict]:
  """Reads <directory>/reward.json else reward.txt -> (reward, rewards)."""
  d = pathlib.Path(directory)
  js, txt = d / "reward.json", d / "reward.txt"
  if js.is_file() and js.read_text(errors="replace").strip():
    rewards = parse_reward_json(js.read_text(errors="replace"), str(js))
    return scalar_reward(rewards, str(js)), rewards
  if txt.is_file() and txt.read_text(errors="replace").strip():
    value = parse_reward_txt(txt.read_text(errors="replace"), str(txt))
    return min(1.0, max(0.0, value)), {"reward": value}
  state = "empty" if js.is_file() or txt.is_file() else "missing"
  raise RewardMissingError(
    f"{VERIFIER_LOGS}/reward.json and reward.txt are {state}: the verifier wrote no reward", logs
  )


# ----------------------------------------------------------------------------------------------
# sandbox steps


def _exports(env: Mapping[str, str]) -> str:
  return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())


def _download_text(sb: Sandbox, sandbox_path: str, host_dir: pathlib.Path) -> str:
  dest = host_dir / pathlib.PurePosixPath(sandbox_path).name
  try:
    sb.download(sandbox_path, dest)
  except (SandboxError, OSError):
    return ""
  return dest.read_text(errors="replace")[-LOG_CHARS:] if dest.is_file() else ""


def upload_dir(sb: Sandbox, host_dir: pathlib.Path, sandbox_dir: str) -> None:
  """Uploads a directory and makes its *.sh executable (uploads may not keep modes)."""
  sb.exec(["mkdir", "-p", sandbox_dir], timeout_s=30)
  sb.upload(host_dir, sandbox_dir)
  sb.exec(
    [
      "bash",
      "-c",
      f"chmod -R a+rX {sandbox_dir} && find {sandbox_dir} -name '*.sh' -exec chmod +x {{}} +",
    ],
    timeout_s=30,
  )


def run_solution(
  sb: Sandbox, task: Task, solution_dir: pathlib.Path, config: RunnerConfig = RunnerConfig()
) -> CommandResult:
  """Uploads `solution_dir` to /solution and runs solve.sh in the persistent shell (so services it
  starts in the background stay up for the verifier), under the agent timeout."""
  upload_dir(sb, solution_dir, "/solution")
  env = {"DEBIAN_FRONTEND": "noninteractive", **task.config.solution.env}
  cmd = f"mkdir -p /logs/agent; {_exports(env)}{ORACLE_COMMAND}"
  return sb.run(cmd, timeout_s=agent_timeout_s(task, config))


def verify(
  sb: Sandbox,
  task: Task,
  config: RunnerConfig = RunnerConfig(),
  artifacts: dict[str, str] | None = None,
) -> RunResult:
  """Uploads /tests, runs test.sh (in verifier_env) under verifier_timeout_s, reads the reward.
  `artifacts` (a dict) receives the packages after the tests and the verifier's files. Raises
  RewardMissingError/RewardFormatError."""
  start = time.monotonic()
  assert task.path is not None, "verify needs a task on disk"
  upload_dir(sb, task.path / "tests", "/tests")
  timeout = verifier_timeout_s(task, config)
  # A reward file the agent left behind must not count when the tests write none.
  cmd = (
    f"mkdir -p {VERIFIER_LOGS}; rm -f {VERIFIER_LOGS}/reward.txt {VERIFIER_LOGS}/reward.json; "
    f"{_exports(verifier_env(task, config))}{TEST_COMMAND}"
  )
  if config.verifier_in_shell:
    res = sb.run(cmd, timeout_s=timeout)
  else:
    res = sb.exec(["bash", "-c", cmd], timeout_s=timeout)
  if artifacts is not None:
    artifacts[artifacts_lib.PACKAGES_AFTER_TESTS] = artifacts_lib.list_packages(sb)
  with runtime.scratch_dir("verifier-") as tmp:
    host = pathlib.Path(tmp) / "verifier"
    try:
      sb.download(VERIFIER_LOGS, host)
    except (SandboxError, OSError):
      host.mkdir(exist_ok=True)
    if artifacts is not None:
      artifacts.update(artifacts_lib.verifier_files(host))
    stdout_file = host / "test-stdout.txt"
    logs = {
      "test-stdout.txt": stdout_file.read_text(errors="replace")[-LOG_CHARS:]
      if stdout_file.is_file()
      else ""
    }
    elapsed = time.monotonic() - start
    if res.status in ("oom", "timeout"):
      return RunResult(
        0.0, {"reward": 0.0}, f"verifier_{res.status}", logs, elapsed, verified_at=time.time()
      )
    reward, rewards = read_reward_dir(host, logs)
  return RunResult(reward, rewards, "ok", logs, time.monotonic() - start, verified_at=time.time())


# ----------------------------------------------------------------------------------------------
# trials

Agent = Callable[[Sandbox], object]


def _open(spec, config: RunnerConfig) -> Sandbox:
  backend = config.backend or "auto"
  if config.sandbox_hosts:
    hosts = importlib.import_module(SANDBOX_HOSTS[config.sandbox_hosts])
    lease = (config.host_max_starting, config.host_cooldown_s, config.host_lease_wait_s)
    return hosts.open_hosted(spec, backend, lease)
  return open_pod(spec, backend) if isinstance(spec, PodSpec) else open_sandbox(spec, backend)


def task_spec(
  task: Task,
  config: RunnerConfig = RunnerConfig(),
  logs: dict | None = None,
  *,
  context: pathlib.Path | None = None,
  dockerfile: str = "Dockerfile",
):
  """The EnvironmentSpec a trial of `task` starts from: its own built image (the build's
  warnings and rewrites go to logs["environment.txt"]), or the Dockerfile translated onto
  config.image. context/dockerfile: another build context than environment/ (a compose main
  service's). Raises SandboxError / DockerfileError when the environment cannot be built."""
  if config.image:
    if context is not None:
      raise SandboxError(
        f"RunnerConfig.image translates environment/Dockerfile only; this task's "
        f"main service builds from {context / dockerfile}"
      )
    return envlib.environment_spec(
      task,
      config.image,
      memory_mb=config.memory_mb,
      allow_network=config.allow_network,
      enforce_limits=config.enforce_limits,
    )
  built = envlib.built_spec(
    task,
    memory_mb=config.memory_mb,
    allow_network=config.allow_network,
    enforce_limits=config.enforce_limits,
    context=context,
    dockerfile=dockerfile,
    packages_before=task_cutoff(task, config),
  )
  if logs is not None:
    logs["environment.txt"] = built.notes()
  return built.spec


def trial_compose(task: Task, config: RunnerConfig = RunnerConfig()) -> compose_lib.Compose | None:
  """The compose file of a multi-service task (None: one container). Raises
  TaskUnsupportedError when this backend/host cannot run it as a podman pod."""
  names = compose_lib.service_names(task)
  if len(names) <= 1:
    return None
  file = compose_lib.compose_file(task)
  reason = pod_unsupported(config.backend or "auto")
  if reason is None and file is None:
    reason = "metadata compose_services names them, but environment/ has no docker-compose.yaml"
  if reason:
    raise TaskUnsupportedError(
      f"{task.path or task.name}: docker-compose with {len(names)} "
      f"services ({', '.join(names)}): {reason}"
    )
  return compose_lib.load_compose(file)


def pod_trial_spec(
  task: Task,
  comp: compose_lib.Compose,
  config: RunnerConfig = RunnerConfig(),
  logs: dict | None = None,
) -> PodSpec:
  """The PodSpec of a multi-service trial: the main service as task_spec builds it, the side
  services from their own images (notes to logs["environment.txt"]). Raises
  TaskUnsupportedError for compose features pods cannot honour."""
  own = (task.path / "environment").resolve()

  def main(context: pathlib.Path, dockerfile: str):
    default = context == own and dockerfile == "Dockerfile"
    return task_spec(
      task, config, logs, context=None if default else context, dockerfile=dockerfile
    )

  try:
    pod, notes = compose_lib.pod_spec(task, comp, main)
  except compose_lib.UnsupportedCompose as err:
    raise TaskUnsupportedError(f"{task.path}: {err}") from None
  if logs is not None:
    logs["environment.txt"] = logs.get("environment.txt", "") + notes
  return pod


# Trial sandboxes another provider starts: backend "<plugin>:<kind>" (e.g. "harbor:podman") opens
# through module TRIAL_PLUGINS[plugin], imported by name on first use (as model families are), whose
# `open_trial_sandbox(task, config, logs)` returns a started Sandbox. The provider sits above this
# module (it builds on the task runtime), so the runner names it instead of importing it.
TRIAL_PLUGINS = {"harbor": "tmax_jax.harbor.sandbox"}


def trial_plugin(backend: str | None):
  """The plugin module of a "<plugin>:<kind>" backend, None for our own backends."""
  plugin, sep, _ = (backend or "").partition(":")
  if not sep:
    return None
  if plugin not in TRIAL_PLUGINS:
    raise SandboxError(
      f"backend {backend!r}: unknown provider {plugin!r}; expected one of {sorted(TRIAL_PLUGINS)}"
    )
  return importlib.import_module(TRIAL_PLUGINS[plugin])


class SandboxStartError(SandboxError):
  """The environment is there but the sandbox did not start from it (infrastructure)."""


def _with_lifetime(spec, config: RunnerConfig):
  """The spec with RunnerConfig.sandbox_lifetime_s as its hard lifetime."""
  if isinstance(spec, PodSpec):
    return dataclasses.replace(spec, main=_with_lifetime(spec.main, config))
  limits = dataclasses.replace(spec.limits, lifetime_s=config.sandbox_lifetime_s)
  return dataclasses.replace(spec, limits=limits)


def _start(task: Task, config: RunnerConfig, logs: dict, open_fn: Callable | None) -> Sandbox:
  """The trial's started sandbox: a provider's (backend "<plugin>:<kind>"), else ours from the
  task's built image (a podman pod for a multi-service compose task). A sandbox that does not
  start from a built environment raises SandboxStartError."""
  plugin = trial_plugin(config.backend)
  if plugin is not None:
    names = compose_lib.service_names(task)
    if len(names) > 1:
      raise TaskUnsupportedError(
        f"{task.path}: docker-compose with {len(names)} services ({', '.join(names)}): the "
        f"{config.backend} backend starts one container per trial"
      )
    return plugin.open_trial_sandbox(task, config, logs)
  comp = trial_compose(task, config)
  spec = pod_trial_spec(task, comp, config, logs) if comp else task_spec(task, config, logs)
  try:
    return (open_fn or (lambda s: _open(s, config)))(_with_lifetime(spec, config))
  except SandboxStartError:
    raise
  except SandboxError as err:
    raise SandboxStartError(str(err)) from err


def _on_disk(task: Task, keep: list) -> Task:
  if task.path is not None:
    return task
  tmp = runtime.scratch_dir("task-")
  keep.append(tmp)
  return write_task(task, pathlib.Path(tmp.name) / (task.name or "task"))


def _solve(
  sb: Sandbox, task: Task, solution: Files, tmp: str, logs: dict, config: RunnerConfig
) -> RunResult | None:
  """Runs `solution` as the oracle; a RunResult when it ran out of memory (reward 0)."""
  sol_dir = pathlib.Path(tmp) / "solution"
  for rel, data in solution.items():
    (sol_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (sol_dir / rel).write_bytes(data)
  res = run_solution(sb, task, sol_dir, config)
  logs["oracle.txt"] = _download_text(sb, "/logs/agent/oracle.txt", pathlib.Path(tmp))
  if res.status == "oom" or (res.exit_code != 0 and _OOM_RE.search(logs["oracle.txt"][-4000:])):
    return RunResult(0.0, {"reward": 0.0}, "agent_oom", logs)
  return None


def _in_sandbox(
  sb: Sandbox, task, agent, config, solution, before, logs: dict, artifacts: dict | None
) -> RunResult:
  """The trial's steps in its started sandbox; a sandbox that stopped working at any point (its
  `lost()`) makes it an infrastructure failure whatever the verifier said."""
  name = getattr(sb, "name", "")
  with runtime.scratch_dir("trial-") as tmp:
    try:
      if artifacts is not None:
        artifacts[artifacts_lib.PACKAGES_START] = artifacts_lib.list_packages(sb)
      if before is not None:
        before(sb)
      result = _solve(sb, task, solution, tmp, logs, config) if solution is not None else None
      if result is None:
        if agent is not None:
          agent(sb)
        result = verify(sb, task, config, artifacts)
    except SandboxError as err:
      return infra_result("sandbox_lost", f"sandbox_error: {err}", logs, name)
    except RewardError as err:
      if not sb.lost():
        err.logs.update(logs)
        err.sandbox = name
        raise
      result = None
    finally:
      for svc, text in getattr(sb, "service_logs", dict)().items():
        logs[f"service-{svc}.txt"] = text
  lost = sb.lost()
  if lost:
    return infra_result("sandbox_lost", f"sandbox_lost: {lost}", logs, name)
  return dataclasses.replace(result, logs={**logs, **result.logs}, sandbox=name)


def run_trial(
  task: Task,
  agent: Agent | None = None,
  config: RunnerConfig = RunnerConfig(),
  *,
  solution: Files | None = None,
  open_fn: Callable | None = None,
  before: Agent | None = None,
  artifacts: bool = False,
) -> RunResult:
  """One trial. `solution` (files with a solve.sh) replaces the task's own for wrong-solution
  checks; `agent(sandbox)` acts before the verifier; with neither, the agent does nothing.
  `before(sandbox)` runs first, right after the environment is built (e.g. a smoke test).
  A multi-service compose task runs in a podman pod (its services' output goes to
  logs["service-<name>.txt"]; open_fn then gets the PodSpec), or raises TaskUnsupportedError.
  An infrastructure failure (INFRA_FAILURES) is returned with `failure` set, never as a score.
  artifacts: keep the trial's artifacts (tasks/artifacts.py) in the result, or on the RewardError
  it raises."""
  start, keep = time.monotonic(), []
  task = _on_disk(task, keep)
  logs: dict[str, str] = {}
  kept: dict[str, str] | None = {} if artifacts else None
  try:
    try:  # TaskUnsupportedError (a pod off podman, a compose feature pods lack) goes up
      sb = _start(task, config, logs, open_fn)
    except SandboxStartError as err:
      result = infra_result("sandbox_start", f"sandbox_start: {err}", logs)
    except (SandboxError, DockerfileError, TaskFormatError) as err:  # a broken environment
      result = infra_result("build_failed", f"{BUILD_FAILED}: {err}", logs)
    else:
      if getattr(sb, "limit_warning", None):
        warning = f"warning: {sb.limit_warning}\n"
        logs["environment.txt"] = logs.get("environment.txt", "") + warning
      with sb:
        try:
          result = _in_sandbox(sb, task, agent, config, solution, before, logs, kept)
        except RewardError as err:
          err.artifacts = dict(kept or {})
          raise
    return dataclasses.replace(
      result, duration_s=time.monotonic() - start, artifacts=dict(kept or {})
    )
  finally:
    for t in keep:
      t.cleanup()


def run_oracle(task: Task, config: RunnerConfig = RunnerConfig(), **kw) -> RunResult:
  """The task's own solution/solve.sh, then the verifier (expected reward 1)."""
  if "solve.sh" not in task.solution:
    raise ValueError(f"{task.path or task.name}: solution/solve.sh is missing; no oracle to run")
  return run_trial(task, None, config, solution=dict(task.solution), **kw)


def run_noop(task: Task, config: RunnerConfig = RunnerConfig(), **kw) -> RunResult:
  """An agent that does nothing, then the verifier (expected reward 0)."""
  return run_trial(task, None, config, **kw)


def run_script(task: Task, script: str, config: RunnerConfig = RunnerConfig(), **kw) -> RunResult:
  """Any bash script as the solution (e.g. a plausible wrong one), then the verifier."""
  return run_trial(task, None, config, solution={"solve.sh": script.encode()}, **kw)
