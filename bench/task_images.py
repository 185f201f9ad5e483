"""Builds every task of a task set from its Dockerfile and runs the oracle and a no-op agent on each
backend: the correctness table of BENCHMARKS.md "Task images" (task, language, build s, cached
build s, oracle, no-op). Trials run under the evaluation's protocol (Terminal-Bench 2.0's): each
task's own agent and verifier timeouts, x --timeout_multiplier, and the tests' package installs
dated by the benchmark's release (--packages_before; '' for the newest).

  python3 bench/task_images.py --tb1 ../shared/data/tb1-public-sample \
      --tb2 ../shared/data/tb2-public-envs --backends bubblewrap,podman --out runs/task_images

Third-party TB2 environments the project never developed against: `--tb2-git DIR` reads
THIRD_PARTY_TB2 (below) from a git directory of zjysteven/terminal-bench-env (environments_harbor/,
extracted with `git archive` into <out>/tb2-git; the repository carries no licence, so nothing of
it is copied into this one), e.g. builds only, no trials:

  python3 bench/task_images.py --tb2-git /path/to/terminal-bench-env/.git --backends "" \
      --out runs/task_images_third_party

A build record names the stand-in base's known deviations when one explains a failed build
(sandbox/bases/deviations.toml), in "deviations".

Resumable: results.jsonl in --out holds one record per (task, backend) and per build; a rerun skips
what is there (--fresh starts over). A TB1 task is converted into <out>/converted/ first. The build
columns: "build s" is the first build of the task in this run (layers already cached by earlier
tasks or runs are reused: the cache is shared, which is the point), "cached build s" a second build
right after (every layer cached). --cache DIR uses a separate, initially empty cache for a cold
run. Build times taken on the shared 2-core machine are indicative only.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import traceback

from tmax_jax import cli

_LANGS = ("python", "cpp", "go", "javascript", "rust", "java")
# Ten environments_harbor/ tasks of zjysteven/terminal-bench-env (commit aaad6aef), none in the
# development sample: three chosen for what they stress (kfp==1.8.22 is a setup.py sdist;
# pydantic==2.5.0 has no cp313 wheel of pydantic-core; software-properties-common is not in
# Debian trixie), seven drawn with random.Random(36) from those that install no torch,
# tensorflow, jax, transformers, spark, chromium or CUDA (multi-GB downloads).
THIRD_PARTY_TB2 = (
  "kubeflow_pipeline_run_medium",
  "opentelemetry_instrumentation_medium",
  "ansible_gather_facts_timeout_medium",
  "ansible_ssh_timeout_playbook_hard",
  "bats_bash_testing_medium",
  "bpf_performance_monitoring_medium",
  "grafana_datasource_proxy_timeout_hard_1",
  "ios_jailbreak_tweak_development_medium",
  "weak_symbol_attribute_hard",
  "wrk_http_benchmarking_medium",
)


def _language(name: str, task) -> str:
  for lang in _LANGS:
    if f"_{lang}_" in name or f"-{lang}-" in name or name.startswith(f"{lang}-"):
      return lang
  tags = [str(t) for t in (task.config.metadata.get("tags") or [])]
  return next((t for t in tags if t in _LANGS), "python" if "evoeval" in name else "-")


def _load(args, out: pathlib.Path):
  from tmax_jax.tasks import tb1
  from tmax_jax.tasks.format import load_task, write_task

  tasks = []
  for d in sorted(pathlib.Path(args.tb1).iterdir()) if args.tb1 else []:
    if (d / "task.yaml").is_file():
      conv = out / "converted" / d.name
      task = (
        load_task(conv) if (conv / "task.toml").is_file() else write_task(tb1.convert_tb1(d), conv)
      )
      tasks.append(("tb1", d.name, task))
  for d in sorted(pathlib.Path(args.tb2).iterdir()) if args.tb2 else []:
    if (d / "task.toml").is_file():
      tasks.append(("tb2", d.name, load_task(d)))
  for name in THIRD_PARTY_TB2 if args.tb2_git else ():
    tasks.append(("tb2-3p", name, load_task(_from_git(args.tb2_git, name, out))))
  if args.only:
    tasks = [t for t in tasks if any(o in t[1] for o in args.only.split(","))]
  return tasks


def _from_git(git_dir: str, name: str, out: pathlib.Path) -> pathlib.Path:
  """environments_harbor/<name> of the git directory `git_dir`, extracted under <out>/tb2-git."""
  dest = out / "tb2-git"
  task_dir = dest / "environments_harbor" / name
  if not (task_dir / "task.toml").is_file():
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
      ["git", "--git-dir", git_dir, "archive", "HEAD", f"environments_harbor/{name}"],
      capture_output=True,
      check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
  return task_dir


def _build_times(task, cfg) -> dict:
  """The task's image built twice (the second from the cache), as its trials under `cfg` build
  it (the same package cutoff)."""
  from tmax_jax.tasks import environment, runner

  cutoff = runner.task_cutoff(task, cfg)
  start = time.monotonic()
  built = environment.built_spec(task, packages_before=cutoff)
  first = time.monotonic() - start
  start = time.monotonic()
  again = environment.built_spec(task, packages_before=cutoff)
  cached = time.monotonic() - start
  return {
    "build_s": round(first, 2),
    "cached_build_s": round(cached, 2),
    "image": built.image.id,
    "same_image": again.image.id == built.image.id,
    "new_layers": sum(1 for s in built.image.steps if not s["cached"]),
    "deviations": [],
    "warnings": list(built.image.warnings),
    "rewrites": list(built.image.rewrites),
  }


def _trial(kind: str, task, cfg) -> dict:
  """One oracle / no-op trial under `cfg` (_protocol), with the limits used recorded beside the
  result."""
  from tmax_jax.tasks import runner

  start = time.monotonic()
  res = (runner.run_oracle if kind == "oracle" else runner.run_noop)(task, cfg)
  return {
    "reward": res.reward,
    "reason": res.reason[:2000],
    "seconds": round(time.monotonic() - start, 1),
    "agent_timeout_s": runner.agent_timeout_s(task, cfg),
    "verifier_timeout_s": runner.verifier_timeout_s(task, cfg),
    "verifier_tail": res.logs.get("test-stdout.txt", "")[-3000:],
    "environment": res.logs.get("environment.txt", ""),
  }


def _protocol(args, backend: str | None):
  """The RunnerConfig of the trials on `backend`: the evaluation's (EvalConfig's runner: each
  task's own agent and verifier timeouts, no RL minimum) x --timeout_multiplier, the tests'
  installs dated by --packages_before, 4 GB sandboxes."""
  import dataclasses

  from tmax_jax.loop.evaluate import EvalConfig

  return dataclasses.replace(
    EvalConfig().runner,
    backend=backend,
    memory_mb=4096,
    timeout_multiplier=args.timeout_multiplier,
    packages_before=args.packages_before,
  )


def _record(path: pathlib.Path, rec: dict) -> None:
  with open(path, "a") as fh:
    fh.write(json.dumps(rec) + "\n")


def table(records: list[dict], backends: list[str]) -> str:
  """The markdown table: one row per task, oracle/no-op per backend."""
  builds = {r["task"]: r for r in records if r["kind"] == "build"}
  trials = {(r["task"], r["kind"], r["backend"]): r for r in records if r["kind"] != "build"}
  head = "| task | set | language | build s | cached build s |" + "".join(
    f" oracle ({b}) | no-op ({b}) |" for b in backends
  )
  lines = [head, "|" + "---|" * (5 + 2 * len(backends))]
  for task, b in sorted(builds.items()):
    cells = [
      task,
      b["set"],
      b["language"],
      f"{b.get('build_s', '-')}",
      f"{b.get('cached_build_s', '-')}",
    ]
    if b.get("error"):  # with the stand-in's known deviations that explain it, if any
      cells[3] = "failed" + (f" ({', '.join(b['deviations'])})" if b.get("deviations") else "")
    for be in backends:
      for kind in ("oracle", "noop"):
        r = trials.get((task, kind, be))
        cells.append(
          "-"
          if r is None
          else f"{r['reward']:g}" + ("" if r["reason"] == "ok" else f" ({r['reason'][:40]})")
        )
    lines.append("| " + " | ".join(cells) + " |")
  for be in backends:
    for kind in ("oracle", "noop"):
      rs = [
        r
        for (t, k, b), r in trials.items()
        if k == kind
        and b == be
        and builds[t]["set"] == ("tb1" if kind == "oracle" else builds[t]["set"])
      ]
      if rs:
        mean = sum(r["reward"] for r in rs) / len(rs)
        lines.append(f"\n{kind} {be}: mean reward {mean:.3f} over {len(rs)} tasks")
  total = sum(b.get("build_s", 0) for b in builds.values())
  cached = sum(b.get("cached_build_s", 0) for b in builds.values())
  lines.append(
    f"\nbuilds: {total:.1f} s first, {cached:.1f} s cached ({100 * cached / max(total, 1e-9):.1f}%)"
  )
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument("--tb1", default=None, help="dir of TB1 task dirs (task.yaml)")
  parser.add_argument("--tb2", default=None, help="dir of TB2/Harbor task dirs (task.toml)")
  parser.add_argument(
    "--tb2_git", default=None, help="git dir of terminal-bench-env: its THIRD_PARTY_TB2 tasks"
  )
  parser.add_argument(
    "--backends", default="bubblewrap,podman", help="comma-separated sandbox backends"
  )
  parser.add_argument("--out", default="runs/task_images", help="results directory")
  parser.add_argument("--only", default="", help="comma-separated substrings of task names")
  parser.add_argument("--cache", default=None, help="a separate (cold) cache dir")
  parser.add_argument("--fresh", action="store_true", help="ignore earlier results")
  parser.add_argument(
    "--timeout_multiplier", type=float, default=1.0, help="Harbor's: scales each task's timeouts"
  )
  parser.add_argument(
    "--packages_before",
    default="release",
    help="tests' package installs resolve before this date ('release': the benchmark's, as "
    "evaluation does; '': the newest)",
  )
  args = parser.parse_args(argv)
  if args.cache:
    os.environ["TMAX_JAX_CACHE"] = args.cache
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  path = out / "results.jsonl"
  if args.fresh and path.exists():
    path.unlink()
  done = [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []
  seen = {(r["task"], r["kind"], r.get("backend")) for r in done}
  backends = [b for b in args.backends.split(",") if b]
  tasks = _load(args, out)
  jobs = [
    (s, n, t, kind, be)
    for s, n, t in tasks
    for kind, be in [("build", None)]
    + [(k, be) for be in backends for k in (("oracle", "noop") if s == "tb1" else ("noop",))]
  ]
  bar = cli.progress(jobs, desc="task images", unit="job")
  for set_name, name, task, kind, backend in bar:
    bar.set_postfix_str(f"{name[:28]} {kind} {backend or ''}")
    if (name, kind, backend) in seen:
      continue
    rec = {
      "task": name,
      "set": set_name,
      "kind": kind,
      "backend": backend,
      "language": _language(name, task),
    }
    try:
      cfg = _protocol(args, backend)
      rec.update(_build_times(task, cfg) if kind == "build" else _trial(kind, task, cfg))
    except Exception as err:
      rec.update(
        {
          "error": f"{type(err).__name__}: {err}"[:3000],
          "deviations": list(getattr(err, "deviations", ())),
          "reward": 0.0,
          "reason": f"error: {type(err).__name__}: {str(err)[:300]}",
        }
      )
      traceback.print_exc(file=sys.stderr)
    _record(path, rec)
    done.append(rec)
  text = table(done, backends)
  (out / "table.md").write_text(text + "\n")
  print(text)
  return 0


if __name__ == "__main__":
  cli.run(main)
