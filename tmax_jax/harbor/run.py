"""Our model under Harbor's harness in one command (launch/harbor_eval.py).

Serves the model of a serving config (configs/serve_*.py: a checkpoint, or random weights, e.g.
configs/serve_random.py) with the OpenAI-compatible API on free loopback ports of its own, runs
`harbor run` with a Harbor agent (terminus-2 by default) pointed at it (`--model openai/<served
name> --base-url .../v1`), stops the server and prints the job's mean reward. Harbor's own trial
results land in <jobs_dir>/<job_name>.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import pathlib
import shutil

from tmax_jax.harbor import jobs
from tmax_jax.harbor import tasks as harbor_tasks
from tmax_jax.loop import ServeConfig, serve

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HarborEvalConfig:
  """What Harbor runs against the served model (the serving side is the serve config)."""

  tasks: str = ""  # a task dir or a dataset dir of Harbor tasks (harbor/tasks.py writes views)
  agent: str = "terminus-2"  # a Harbor agent name: terminus-2, oracle, nop, openhands, ...
  environment: str = jobs.ENVIRONMENT  # or a Harbor type: podman, docker, daytona, modal, ...
  environment_kwargs: tuple[str, ...] = ("backend=bubblewrap",)  # KEY=VALUE for the environment
  agent_kwargs: tuple[str, ...] = ()  # e.g. ("max_turns=50", "temperature=1.0")
  jobs_dir: str = "runs/harbor"  # Harbor's jobs dir; the job is jobs_dir/job_name
  job_name: str = ""  # "" = the start time
  n_concurrent: int = 2  # trials Harbor runs at once
  n_attempts: int = 1  # attempts per task (pass@k takes k)
  timeout_s: float = 24 * 3600.0  # wall-clock cap on the whole `harbor run`

  def __post_init__(self):
    if not self.tasks:
      raise ValueError("HarborEvalConfig.tasks: name a task dir or a dataset dir of tasks")


def mean_reward(job_dir: pathlib.Path) -> tuple[float, int, int]:
  """(mean reward with errors as 0, trials, errored trials) of a Harbor job."""
  found = [o for trials in jobs.outcomes(job_dir).values() for o in trials]
  total = sum(o.reward or 0.0 for o in found)
  return total / max(1, len(found)), len(found), sum(o.reward is None for o in found)


def private_ports(serve_config: ServeConfig) -> ServeConfig:
  """`serve_config` on free ports, gRPC and HTTP: the job's server is its own (Harbor reaches it
  through the base URL it is given), so a server already running from the same config, on the
  ports it names, does not stop the job."""
  return dataclasses.replace(
    serve_config,
    serving=dataclasses.replace(serve_config.serving, port=0),
    openai=dataclasses.replace(serve_config.openai, port=0),
  )


def run_harbor_eval(cfg: HarborEvalConfig, serve_config: ServeConfig) -> pathlib.Path:
  """Serves `serve_config`'s model, runs the Harbor job against it, returns the job dir. A run
  that fails (the model does not serve, the job does not finish) removes the task views it wrote
  (<jobs_dir>/<job_name>.tasks) and the directories it created that are left empty."""
  name = cfg.job_name or dt.datetime.now().strftime("%Y-%m-%d__%H-%M-%S")
  jobs_dir = pathlib.Path(cfg.jobs_dir)
  views = jobs_dir / f"{name}.tasks"
  made = [d for d in (views, jobs_dir, *jobs_dir.parents) if not d.exists()]  # deepest first
  try:
    return _run(cfg, private_ports(serve_config), views)
  except BaseException:
    if views in made:
      shutil.rmtree(views, ignore_errors=True)
    for d in made:
      with contextlib.suppress(OSError):
        d.rmdir()  # only when empty: the job's log and anything else written there stay
    raise


def _run(cfg: HarborEvalConfig, serve_config: ServeConfig, views: pathlib.Path) -> pathlib.Path:
  """Task views (when Harbor needs them) -> the server -> the job -> its summary line."""
  name = views.name.removesuffix(".tasks")
  tasks, unbuilt = harbor_tasks.runnable(
    pathlib.Path(cfg.tasks), views, podman_images=cfg.environment == "podman"
  )
  for task, why in unbuilt.items():
    log.warning("%s: not run (%s)", task, why)
  server = serve.start_from_config(serve_config)
  try:
    spec = jobs.JobSpec(
      tasks=str(tasks),
      agent=cfg.agent,
      environment=cfg.environment,
      model=f"openai/{server.openai.model_name}",
      base_url=server.openai.base_url,
      agent_kwargs=cfg.agent_kwargs,
      environment_kwargs=cfg.environment_kwargs,
      n_concurrent=cfg.n_concurrent,
      n_attempts=cfg.n_attempts,
    )
    log.info("harbor %s", " ".join(spec.args(pathlib.Path(cfg.jobs_dir), name)))
    # litellm's OpenAI client wants a key even for a local server
    job_dir = jobs.run_job(
      spec, cfg.jobs_dir, name, timeout_s=cfg.timeout_s, env={"OPENAI_API_KEY": "unused"}
    )
  finally:
    server.stop()
  mean, n, errors = mean_reward(job_dir)
  print(json.dumps({"job_dir": str(job_dir), "mean_reward": mean, "trials": n, "errors": errors}))
  return job_dir
