"""Per-trial overhead of Harbor's podman environment vs our podman and bubblewrap backends: one
trial = start the task's sandbox + 20 persistent-shell commands + close (the task: a procedural
line_tool task, its own image built once first).

  python3 bench/harbor_overhead.py [--backends harbor:podman,podman,bubblewrap] [--trials 5]
      [--commands 20] [--append BENCHMARKS.md] [--quick]
  python3 bench/harbor_overhead.py --agreement ../shared/data/tb2-public-envs --agents nop
      --out runs/harbor_agreement   (the per-task agreement table on every path, no timing)

Backends: ours by name; "harbor:<type>" is a Harbor environment through the bridge
(tmax_jax/harbor/sandbox.py), e.g. harbor:podman (Harbor's own), or our bubblewrap behind Harbor's
API: harbor:tmax_jax.harbor.environment:TmaxEnvironment. Prints a markdown table; --append adds
the rows to BENCHMARKS.md unless the load average before a backend's run exceeded half the cores
(report.record_row). --quick: one trial of 5 commands per backend (a smoke run).
"""

from __future__ import annotations

import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402  (bench/report.py)

from tmax_jax import cli  # noqa: E402
from tmax_jax.harbor import agreement  # noqa: E402
from tmax_jax.harbor import sandbox as harbor_sandbox  # noqa: E402
from tmax_jax.harbor import tasks as harbor_tasks  # noqa: E402
from tmax_jax.sandbox import open_sandbox  # noqa: E402
from tmax_jax.tasks import environment as envlib  # noqa: E402
from tmax_jax.tasks import format as fmt  # noqa: E402
from tmax_jax.tasks import runner  # noqa: E402
from tmax_jax.tasks.procedural import registry  # noqa: E402


def _task(root: pathlib.Path) -> fmt.Task:
  task = fmt.write_task(registry.build_task("line_tool", 0, 0), root / "line_tool")
  envlib.built_spec(task)  # the image is built (and cached) before any timing
  return task


def _opener(task: fmt.Task, backend: str):
  if harbor_sandbox.is_harbor(backend):
    if backend == "harbor:podman":
      harbor_tasks.podman_image(task)  # pulled into podman once, outside the timing
    cfg = runner.RunnerConfig(backend=backend)
    return lambda: harbor_sandbox.open_trial_sandbox(task, cfg)
  spec = envlib.built_spec(task).spec
  return lambda: open_sandbox(spec, backend)


def bench_backend(task: fmt.Task, backend: str, trials: int, commands: int) -> dict:
  open_fn = _opener(task, backend)
  start_s, run_s, close_s = [], [], []
  for _ in cli.progress(range(trials), desc=backend, leave=False):
    t0 = time.perf_counter()
    sb = open_fn()
    t1 = time.perf_counter()
    for i in range(commands):
      res = sb.run(f"echo {i}")
      assert res.output == f"{i}\n", res
    t2 = time.perf_counter()
    sb.close()
    start_s.append(t1 - t0)
    run_s.append((t2 - t1) / commands)
    close_s.append(time.perf_counter() - t2)
  total = [s + r * commands + c for s, r, c in zip(start_s, run_s, close_s, strict=True)]
  return {
    "backend": backend,
    "trials": trials,
    "commands": commands,
    "start_s": statistics.median(start_s),
    "command_s": statistics.median(run_s),
    "close_s": statistics.median(close_s),
    "trial_s": statistics.median(total),
  }


HEADING = (
  "\n## Harbor environments: per-trial overhead (bench/harbor_overhead.py, issue 31)\n\n"
  "`python3 bench/harbor_overhead.py --append BENCHMARKS.md` (5 trials per backend): one trial = "
  "start the task's sandbox + 20 persistent-shell commands (`echo i`) + close, on a procedural "
  "line_tool task (its image built and, for harbor:podman, pulled into podman beforehand). "
  "harbor:podman = Harbor's podman environment (podman-compose) through the Harbor bridge; "
  "medians.\n\n| when (UTC) | backend | start | per command | close | trial (start + 20 + close) "
  "| load avg |\n|---|---|---|---|---|---|---|\n"
)


def row_text(r: dict) -> str:
  return (
    f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {r['backend']} | "
    f"{r['start_s']:.2f} s | {r['command_s'] * 1e3:.0f} ms | {r['close_s']:.2f} s | "
    f"{r['trial_s']:.2f} s | {r['load_before']:.2f} |"
  )


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument(
    "--backends", default="harbor:podman,podman,bubblewrap", help="trial backends to time"
  )
  parser.add_argument("--trials", type=int, default=5, help="trials per backend")
  parser.add_argument("--commands", type=int, default=20, help="commands per trial")
  parser.add_argument("--append", default=None, help="BENCHMARKS.md to add the rows to")
  parser.add_argument("--quick", action="store_true", help="1 trial of 5 commands per backend")
  parser.add_argument("--agreement", default=None, help="a task dir: print the agreement table")
  parser.add_argument("--agents", default="oracle,nop", help="Harbor agents to compare")
  parser.add_argument(
    "--environments", default="plugin,podman", help="Harbor environments to compare"
  )
  parser.add_argument("--out", default="runs/harbor_agreement", help="the agreement jobs' dir")
  args = parser.parse_args(argv)
  if args.agreement:
    table = agreement.compare(
      args.agreement, args.out, args.agents.split(","), args.environments.split(",")
    )
    print(agreement.markdown(table))
    return 0 if all(len(set(row.values())) == 1 for row in table.values()) else 1
  trials, commands = (1, 5) if args.quick else (args.trials, args.commands)
  with tempfile.TemporaryDirectory(prefix="harbor_bench_") as tmp:
    task = _task(pathlib.Path(tmp))
    for backend in args.backends.split(","):
      before = report.load_average()
      r = bench_backend(task, backend, trials, commands)
      r["load_before"] = before
      report.record_row(
        args.append, "bench/harbor_overhead.py", HEADING, row_text(r), loads=(before,)
      )
  return 0


if __name__ == "__main__":
  cli.run(main)
