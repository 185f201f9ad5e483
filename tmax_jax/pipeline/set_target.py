"""The calibrated set against the recipe's set-level difficulty target, the selection that steers
the published set toward it, and what calibration cost.

Target (recipe.md, TMAX-15K): over the whole set, the reference (strong) policy's pass@1 ~42% and
pass@8 ~53% (CalibrationConfig.target_pass_at_1 / _8). Figures: per task, the k trials of its
last calibration round give c passes of n; its pass@j is difficulty.pass_at_k(n, c, j) (the
unbiased estimator, pass@1 = c/n) and the set's figure is the mean over tasks. pass@8 needs
k >= 8 episodes per round: with fewer it is not estimated and only pass@1 is targeted (pass@k is
reported beside it).

Steering: the set is steered at publish, by selection, not by moving knobs. A gap of only 11
points between pass@8 and pass@1 says the recipe's set is bimodal: on average 47% of its tasks
go unsolved in 8 tries (1 - pass@8), so the rest are solved at ~0.42 / 0.53 = 79%. Knob moves
aim every task at one pass@1; a set of tasks each near 0.42 has pass@8 ~0.99, so no band centre,
however steered, reaches both figures, and a running-mean band would make a task's fate depend on
which tasks happened to finish first (and on a resume). Selection is deterministic from the
records: among the tasks that passed every stage, the greedy step drops the task whose removal
brings the set's figures closest to the target (squared distance over the targeted figures; ties
to the smaller task id) while that strictly helps, at most `set_max_drop` of them and never the
last. Dropped tasks are rejections ("select:off_target", with the figures in the reason), redone
from scratch by every publish. With the default band (0.1, 0.9) every kept task was solved at least
once, so with k = 8 the set's pass@8 is 1 and only pass@1 can move; `--band 0 0.9` keeps the
never-solved tasks too and lets the selection reach the target's pass@8 as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tmax_jax.loop.evaluate.report import total_usage
from tmax_jax.pipeline.config import CalibrationConfig
from tmax_jax.pipeline.stages import rejected
from tmax_jax.tasks import difficulty

TARGET_K = 8  # the recipe's pass@8
SELECT = "select"  # the stage name of a selection's rejection record
CATEGORY = "off_target"
_EPS = 1e-12  # a removal must lower the distance by more than rounding


def targets(cal: CalibrationConfig) -> dict[str, float]:
  """The target figures this run can estimate: pass@1, and pass@8 when k >= 8."""
  out = {"pass@1": cal.target_pass_at_1}
  if cal.k >= TARGET_K:
    out[f"pass@{TARGET_K}"] = cal.target_pass_at_8
  return out


def calibrated(states: Iterable[dict]) -> list[dict]:
  return [s for s in states if s.get("calibration", {}).get("rounds")]


def _rewards(state: dict, r: int) -> list[float]:
  """The rewards of a task's calibration round `r` (-1: its last)."""
  return [t["reward"] for t in state["calibration"]["rounds"][r]["trials"]]


def last_round_rewards(states: Iterable[dict]) -> dict[str, list[float]]:
  """{task id: the rewards of its last calibration round} for every calibrated task."""
  return {s["id"]: _rewards(s, -1) for s in states}


def per_task(groups: Mapping[str, Sequence[float]], k: int) -> dict[str, dict[str, float]]:
  """{task: {"n", "c", "pass@1", "pass@k", "pass@8" (k >= 8)}} from each task's rewards."""
  ks = sorted({1, k} | ({TARGET_K} if k >= TARGET_K else set()))
  return difficulty.per_task_pass_at_k(groups, ks)


def figures(table: Mapping[str, Mapping[str, float]], k: int, target: Mapping[str, float]) -> dict:
  """The set's mean pass@1 / pass@k (/ pass@8) over `table`'s tasks and the gap to `target`
  (figure - target; positive: the set is easier than the target). None where there are no tasks."""
  names = sorted({"pass@1", f"pass@{k}", *target}, key=lambda m: int(m.split("@")[1]))
  means = {
    m: difficulty.mean_pass_at_k(table, int(m.split("@")[1])) if table else None for m in names
  }
  gap = {m: None if means[m] is None else means[m] - t for m, t in target.items()}
  return {"tasks": len(table), **means, "gap": gap}


def select(table: Mapping[str, Mapping[str, float]], target: Mapping[str, float], max_drop: float):
  """The task ids to drop (in the order dropped) so that the rest's mean figures come closest to
  `target`: greedy, each step the removal that lowers the squared distance most, while it lowers
  it, at most floor(max_drop * n) tasks and never the last one."""
  ids = sorted(table)
  budget = min(int(max_drop * len(ids)), len(ids) - 1)
  if budget <= 0:
    return []
  values = np.array([[table[i][m] for m in target] for i in ids], dtype=np.float64)  # [n, M]
  goal = np.array(list(target.values()), dtype=np.float64)  # [M]
  left, sums, dropped = np.ones(len(ids), dtype=bool), values.sum(0), []  # sums: [M]
  current = float(((sums / len(ids) - goal) ** 2).sum())
  for _ in range(budget):
    rest = int(left.sum()) - 1
    after = (((sums - values) / rest - goal) ** 2).sum(-1)  # [n]: the distance without each task
    after[~left] = np.inf
    best = int(np.argmin(after))
    if after[best] >= current - _EPS:
      break
    dropped.append(ids[best])
    left[best], sums, current = False, sums - values[best], float(after[best])
  return dropped


def per_round(states: Sequence[dict], k: int, target: Mapping[str, float]) -> list[dict]:
  """Round r's figures over the tasks that played a round r (round 0: every calibrated task)."""
  most = max((len(s["calibration"]["rounds"]) for s in states), default=0)
  rows = []
  for r in range(most):
    groups = {s["id"]: _rewards(s, r) for s in states if len(s["calibration"]["rounds"]) > r}
    rows.append({"round": r, **figures(per_task(groups, k), k, target)})
  return rows


def cost(states: Sequence[dict], kept: int) -> dict:
  """What calibrating `states` cost (every round of every calibrated task, rejected ones
  included): episodes, the endpoint's usage (cost_usd None when unpriced or recorded before
  usage was), the episodes' sandbox seconds (what the 15k projection scales) and the calibrate
  stages' wall seconds (waits for a sandbox slot and oracle re-runs included; a killed stage's
  part not), in total and per kept task."""
  trials = [t for s in states for r in s["calibration"]["rounds"] for t in r["trials"]]
  usage = total_usage(trials) or {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
  usage.setdefault("cost_usd", None)
  total = {
    "tasks": len(states),
    "episodes": len(trials),
    **usage,
    "episode_seconds": round(sum(t["duration_s"] for t in trials), 3),
    "stage_seconds": round(
      sum(s["stages"].get("calibrate", {}).get("seconds", 0.0) for s in states), 3
    ),
  }
  each = {
    key: None if v is None or not kept else round(v / kept, 6)
    for key, v in total.items()
    if key != "tasks"
  }
  return {"total": total, "per_kept_task": each, "kept": kept}


def clear(states: Iterable[dict]) -> None:
  """Forgets a previous publish's selection (every publish selects afresh from the records)."""
  for s in states:
    s["stages"].pop(SELECT, None)


def _reason(
  row: Mapping[str, float], target: Mapping[str, float], before: dict, after: dict
) -> str:
  def fig(d: Mapping) -> str:
    return ", ".join(f"{m} {d[m]:.3f}" for m in target)

  return (
    f"dropped by the set-level selection toward the target ({fig(target)}): this task has "
    f"{fig(row)}; the set went from {fig(before)} over {before['tasks']} tasks to {fig(after)} "
    f"over {after['tasks']}"
  )


def steer(cal: CalibrationConfig, states: Sequence[dict], candidates: Sequence[dict], run: int):
  """Selects among `candidates` (the tasks that passed every stage), marks the dropped ones
  rejected (a SELECT record, run `run`) -> the report's set section: the target, the figures over
  the published set, the candidates before selection and every calibrated task (last round), per
  round, and what the selection dropped."""
  target, done = targets(cal), calibrated(states)
  table = per_task(last_round_rewards(done), cal.k)
  pool = {s["id"]: table[s["id"]] for s in candidates if s["id"] in table}
  dropped = select(pool, target, cal.set_max_drop)
  gone = set(dropped)
  before = figures(pool, cal.k, target)
  after = figures({i: row for i, row in pool.items() if i not in gone}, cal.k, target)
  for s in candidates:
    if s["id"] in gone:
      reason = _reason(pool[s["id"]], target, before, after)
      s["stages"][SELECT] = rejected(reason, CATEGORY).record(run, 0.0)
  return {
    "target": {"pass@1": cal.target_pass_at_1, f"pass@{TARGET_K}": cal.target_pass_at_8},
    "targeted": list(target),
    "published": after,
    "before_selection": before,
    "calibrated": figures(table, cal.k, target),
    "per_round": per_round(done, cal.k, target),
    "selection": {"max_drop": cal.set_max_drop, "candidates": len(pool), "dropped": dropped},
  }


def _figs(fig: Mapping, target: Mapping[str, float]) -> str:
  names = [m for m in fig if m.startswith("pass@")]
  parts = []
  for m in names:
    if fig[m] is None:
      parts.append(f"{m} -")
    elif m in target:
      parts.append(f"{m} {fig[m]:.3f} (target {target[m]:.2f}, gap {fig['gap'][m]:+.3f})")
    else:
      parts.append(f"{m} {fig[m]:.3f}")
  return ", ".join(parts)


def summary(section: Mapping, spent: Mapping) -> list[str]:
  """The printed lines: the set's figures against the target, the selection, the cost."""
  target = {m: section["target"][m] for m in section["targeted"]}
  pub, cal, sel = section["published"], section["calibrated"], section["selection"]
  total, each = spent["total"], spent["per_kept_task"]
  usd = "unpriced" if total["cost_usd"] is None else f"${total['cost_usd']:.2f}"
  usd_each = "" if each["cost_usd"] is None else f", ${each['cost_usd']:.4f}"
  tokens = total["prompt_tokens"] + total["completion_tokens"]
  tokens_each = (
    None if each["prompt_tokens"] is None else each["prompt_tokens"] + each["completion_tokens"]
  )
  return [
    f"reference policy over the {pub['tasks']} published tasks: {_figs(pub, target)}",
    f"  over all {cal['tasks']} calibrated tasks (last round): {_figs(cal, target)}",
    f"  set selection dropped {len(sel['dropped'])} of {sel['candidates']} "
    f"(at most {sel['max_drop']:.0%})",
    f"calibration cost: {total['episodes']} episodes, {total['requests']} requests, {tokens} "
    f"tokens, {usd}, {total['episode_seconds']:.0f} sandbox-s; per kept task: "
    f"{each['episodes']} episodes, {tokens_each} tokens{usd_each}, "
    f"{each['episode_seconds']} sandbox-s",
  ]
