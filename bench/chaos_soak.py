"""Chaos soak of the RL loop: the tiny RL job in async mode with more concurrent
episodes than server slots, on tasks whose verifiers misbehave, while sandboxes, streams, the
inference server, image builds and the trainer itself are hit at seeded random times. Prints per
fault kind: injected, recovered, episodes dropped as infrastructure failures, episodes scored;
and each invariant as held / broken / not exercised. Exit 1 when one is broken.

python3 bench/chaos_soak.py --minutes 30 --seed 0 --backend bubblewrap [--out DIR] [--json F]
python3 bench/chaos_soak.py --minutes 30 --seed 0 --faults none   # the same loop without faults
python3 bench/chaos_soak.py --minutes 2.5 --seed 0 --cluster      # node faults on a local Ray
                                                                  # cluster (bench/chaos/cluster.py)

--minutes is the fault window after the trainer's first step (start-up, ~1 min, comes on top).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chaos import report, soak  # noqa: E402  (after the checkout is on the path)
from tmax_jax import cli, json_io  # noqa: E402


def parse(argv=None) -> argparse.Namespace:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--minutes", type=float, required=True, help="fault window, in minutes")
  p.add_argument("--seed", type=int, default=0, help="fault times, sandbox choices, task order")
  p.add_argument(
    "--backend", choices=("bubblewrap", "podman"), default="bubblewrap", help="sandbox backend"
  )
  p.add_argument("--faults", choices=("all", "none"), default="all", help="none: the baseline")
  p.add_argument(
    "--on_failure",
    choices=("rerun", "drop", "mask"),
    default="drop",
    help="rollout.on_failure: what happens to a group the infrastructure failed",
  )
  p.add_argument(
    "--cluster",
    action="store_true",
    help="on a local Ray cluster through launch/cluster.py, with node faults (needs ray)",
  )
  p.add_argument("--episodes", type=int, default=8, help="concurrent episodes (> server slots)")
  p.add_argument("--out", default="", help="work dir (default runs/chaos_soak/<backend>-<seed>)")
  p.add_argument("--json", default="", help="also write the result here")
  return p.parse_args(argv)


def main(argv=None) -> dict:
  args = parse(argv)
  name = f"{'cluster-' if args.cluster else ''}{args.backend}-{args.seed}"
  out = pathlib.Path(args.out or ROOT / "runs" / "chaos_soak" / name)
  opts = soak.Options(
    minutes=args.minutes,
    seed=args.seed,
    out=out.resolve(),
    backend=args.backend,
    faults=args.faults == "all",
    episodes=args.episodes,
    on_failure=args.on_failure,
  )
  if args.cluster:
    from bench.chaos import cluster  # imports ray

    record = cluster.ClusterSoak(opts).run()
  else:
    record = soak.Soak(opts).run()
  json_io.write_json_atomic(out / "soak.json", record, indent=1)
  result = report.analyze(record)
  print(report.table(result), flush=True)
  if args.json:
    json_io.write_json_atomic(args.json, result, indent=1)
  return result


def cli_main(argv: list[str]) -> int:
  """Exit 1 when an invariant broke."""
  return 0 if main(argv)["held"] else 1


if __name__ == "__main__":
  cli.run(cli_main)
