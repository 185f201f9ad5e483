"""Task pipeline throughput: tasks/hour through write -> build -> validate (-> calibrate) ->
decontaminate -> publish with a scripted OpenAI-compatible writer on loopback, and the projected
wall time of 15k tasks (the TMAX-15K size) at W writer workers.

  python3 bench/task_pipeline.py --n 60 --workers 8 --sandbox_workers 2 --out runs/bench_pipeline
  python3 bench/task_pipeline.py --quick        # 6 tasks: checks that the bench runs

The writer answers at once by default (--writer_latency adds a real model's generation time per
call) and gives every task an image layer of its own (as a real writer's Dockerfiles differ), so
the measured rate is the build/smoke cost of the sandbox stages on this machine. The
projection takes the measured per-task seconds of each resource, writer (write stage, including
--writer_latency) and sandboxes (build + validate + calibrate), and assumes the stages overlap, as
the pipeline runs them: 15k tasks take about max(writer seconds x 15k / W, sandbox seconds x 15k
/ S). With --calibrate, calibration's measured cost per kept task (report.json's
calibration.cost: episodes, the reference policy's requests and tokens, USD when priced, sandbox
seconds of the episodes) is reported and projected to 15k kept tasks (the scripted policy
reports no tokens: a real endpoint's run gives them). Prints one JSON object (also written to
<out>/bench.json).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tmax_jax import cli  # noqa: E402
from tmax_jax.pipeline import scripted  # noqa: E402
from tmax_jax.pipeline.__main__ import main as pipeline_main  # noqa: E402

TARGET = 15_000
SANDBOX_STAGES = ("build", "validate", "calibrate")


def _stage_seconds(out: pathlib.Path) -> dict[str, list[float]]:
  seconds: dict[str, list[float]] = {}
  for path in (out / "state").glob("*.json"):
    for stage, rec in json.loads(path.read_text())["stages"].items():
      seconds.setdefault(stage, []).append(rec["seconds"])
  return seconds


def _projection(per_task: dict[str, float], workers: int, sandbox_workers: int) -> dict:
  writer = per_task.get("write", 0.0)
  sandbox = sum(per_task.get(s, 0.0) for s in SANDBOX_STAGES)
  writer_h = writer * TARGET / workers / 3600
  sandbox_h = sandbox * TARGET / sandbox_workers / 3600
  return {
    "workers": workers,
    "sandbox_workers": sandbox_workers,
    "writer_bound_hours": round(writer_h, 2),
    "sandbox_bound_hours": round(sandbox_h, 2),
    "projected_hours": round(max(writer_h, sandbox_h), 2),
  }


def _calibration_15k(per_kept: dict, sandbox_workers: int) -> dict:
  """Calibration's cost of 15k kept tasks at the measured cost per kept task."""
  scale = lambda v: None if v is None else round(v * TARGET, 2)  # noqa: E731
  tokens = [per_kept[k] for k in ("prompt_tokens", "completion_tokens")]
  seconds = per_kept["episode_seconds"]
  return {
    "episodes": scale(per_kept["episodes"]),
    "requests": scale(per_kept["requests"]),
    "tokens": None if None in tokens else scale(sum(tokens)),
    "cost_usd": scale(per_kept["cost_usd"]),
    "sandbox_hours": None
    if seconds is None
    else round(seconds * TARGET / sandbox_workers / 3600, 2),
  }


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--n", type=int, default=60, help="tasks to run through the pipeline")
  p.add_argument("--workers", type=int, default=8, help="concurrent writer calls (W)")
  p.add_argument("--sandbox_workers", type=int, default=2, help="concurrent sandbox stages (S)")
  p.add_argument("--writer_latency", type=float, default=0.0, help="seconds per writer call")
  p.add_argument("--calibrate", action="store_true", help="include calibration (scripted policy)")
  p.add_argument("--k", type=int, default=2, help="calibration episodes per task and round")
  p.add_argument(
    "--project_workers",
    type=int,
    nargs="+",
    default=[8, 32, 128],
    help="W values of the 15k projection (S = --sandbox_workers)",
  )
  p.add_argument(
    "--backend",
    default="auto",
    help="sandbox backend of the pipeline (podman also builds the multi-service compose tasks)",
  )
  p.add_argument("--out", default="runs/bench_pipeline", help="pipeline output dir (replaced)")
  p.add_argument("--quick", action="store_true", help="6 tasks, to check the bench runs")
  args = p.parse_args(argv)
  n = 6 if args.quick else args.n
  out = pathlib.Path(args.out)
  shutil.rmtree(out, ignore_errors=True)
  policy = None
  if args.calibrate:
    from tmax_jax.agents import EpisodeConfig
    from tmax_jax.tokenizers import load_tokenizer

    policy = scripted.ScriptedPolicy(load_tokenizer("qwen3"), EpisodeConfig())
  writer = scripted.ScriptedWriter(latency_s=args.writer_latency, unique_builds=True)
  flags = ["--model", "scripted", "--n", str(n), "--out", str(out), "--no-progress"]
  flags += ["--workers", str(args.workers), "--sandbox_workers", str(args.sandbox_workers)]
  flags += ["--backend", args.backend]
  flags += ["--k", str(args.k), "--rounds", "1"] if args.calibrate else ["--no-calibrate"]
  with scripted.ScriptedEndpoint(scripted.route(writer, policy)) as ep:
    start = time.monotonic()
    rc = pipeline_main(["--endpoint", ep.base_url, *flags])
    wall = time.monotonic() - start
  if rc != 0:
    print(f"error: the pipeline exited {rc}", file=sys.stderr)
    return rc
  seconds = _stage_seconds(out)
  per_task = {s: statistics.fmean(v) for s, v in seconds.items()}
  report = json.loads((out / "report.json").read_text())
  result = {
    "n": n,
    "kept": report["kept"],
    "wall_s": round(wall, 1),
    "tasks_per_hour": round(n / wall * 3600, 1),
    "workers": args.workers,
    "sandbox_workers": args.sandbox_workers,
    "writer_latency_s": args.writer_latency,
    "calibrate": args.calibrate,
    "backend": args.backend,
    "mean_stage_s": {s: round(v, 3) for s, v in per_task.items()},
    "projection_15k": [
      _projection(per_task, w, args.sandbox_workers) for w in args.project_workers
    ],
  }
  if args.calibrate:
    cost = report["calibration"]["cost"]
    result["calibration"] = {
      "set": {k: report["calibration"]["set"][k] for k in ("target", "published", "calibrated")},
      "total": cost["total"],
      "per_kept_task": cost["per_kept_task"],
      "projection_15k_kept": _calibration_15k(cost["per_kept_task"], args.sandbox_workers),
    }
  (out / "bench.json").write_text(json.dumps(result, indent=1))
  print(json.dumps(result))
  return 0


if __name__ == "__main__":
  cli.run(main)
