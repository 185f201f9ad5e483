"""Judges a soak (soak.Soak.run's record + the run's rollout log and checkpoints): per fault kind
injected / recovered / episodes dropped as infrastructure failures / episodes scored, and each
invariant held / broken / not exercised, with the evidence."""

from __future__ import annotations

import collections
import itertools
import json
import pathlib

from bench.chaos import faults, tasks
from bench.chaos.soak import PROCESS_KINDS, max_step

WINDOW_S = 120.0  # a failure this long after a process fault may be its doing
CAUSES = {  # process fault -> the failure kinds it can cause in the episodes it hits
  "sandbox_kill": {"sandbox_lost", "sandbox_start", "verifier_error"},
  "server_restart": {"server"},
  "stream_drop": {"server"},
  "build_delay": {"build_failed", "sandbox_start"},
  "trainer_kill": set(),  # its episodes die with it: none is ever recorded
  # node faults of the cluster soak (bench/chaos/cluster.py)
  "replica_kill": {"server"},
  "host_kill": {"sandbox_lost", "sandbox_start"},
  "inference_node_kill": {"server"},
  "sandbox_node_kill": {"sandbox_lost", "sandbox_start"},
}
# the kinds whose episodes die as a lost server's (ServerRestartedError): the others' cut streams
# are retried on the same instance
SERVER_LOSSES = ("server_restart", "replica_kill", "inference_node_kill")
INVARIANTS = (
  "infra_never_scored",
  "exact_position_after_restarts",
  "no_leftovers",
  "hard_lifetime",
  "server_overload",
  "loop_survives",
)


def _parsed(lines: list[str]) -> list[dict]:
  out = []
  for line in lines:
    try:
      out.append(json.loads(line))
    except json.JSONDecodeError:  # a line cut by a SIGKILL mid-write
      continue
  return out


def _lines(path: pathlib.Path) -> list[str]:
  return path.read_text().splitlines() if path.exists() else []


def _timeline(soak: dict, lines: list[str]) -> list[dict]:
  """The records of the steps the final state is made of: each run's lines up to its last
  checkpoint (what a killed run did after it is redone by the next run)."""
  out = []
  for run in soak["runs"]:
    part = _parsed(lines[run["first_line"] : run["end_line"]])
    out += [r for r in part if r["step"] <= run["ckpt"]]
  return out


def _attribute(failure: dict, events: list[dict]) -> str:
  """The process fault a failure most likely comes from ("" when none explains it)."""
  best = ""
  for ev in events:
    if failure["kind"] not in CAUSES[ev["kind"]] or not 0 <= failure["at"] - ev["at"] <= WINDOW_S:
      continue
    if ev["kind"] == "sandbox_kill" and failure.get("sandbox") not in ("", ev["sandbox"]):
      continue
    if "ServerRestartedError" in failure["message"] and ev["kind"] not in SERVER_LOSSES:
      continue  # a cut stream is retried on the same instance; only a restart loses requests
    best = ev["kind"]
  return best


def _check_scoring(soak: dict, records: list[dict]) -> tuple[list, dict]:
  """Violations of "no infrastructure failure is ever scored", and per task kind counts."""
  kinds, bad = soak["task_kinds"], []
  rows = collections.defaultdict(collections.Counter)
  kills = [e for e in soak["events"] if "sandbox" in e or "sandboxes" in e]
  for rec in records:
    kind = kinds.get(rec["task"], "normal")
    mode, allowed = tasks.EXPECTED[kind]
    final = [f for f in rec["failures"] if f["attempt"] == rec.get("attempt", 0)]
    rows[kind]["injected"] += len(rec["episodes"]) + len(final)
    rows[kind]["scored"] += len(rec["episodes"])
    rows[kind]["dropped"] += len(final)
    for f in final:
      rows[kind]["recovered"] += int(mode == "dropped" and f["kind"] in allowed)
    for ep in rec["episodes"]:
      if mode == "dropped" or ep["reason"] not in allowed:
        bad.append(f"{rec['task']} step {rec['step']} sample {ep['sample']} scored: {ep}")
      else:
        rows[kind]["recovered"] += 1
      for kill in kills:  # one sandbox, or every sandbox a killed host held (name prefixes)
        hit = ep["sandbox"] == kill.get("sandbox") or ep["sandbox"].startswith(
          tuple(kill.get("sandboxes", ()))
        )
        if hit and ep["verified_at"] >= kill["at"]:
          bad.append(f"{ep['sandbox']} was killed at {kill['at']:.1f}, scored later: {ep}")
  return bad, rows


def _check_position(soak: dict, timeline: list[dict], lines: list[str]) -> list[str]:
  """Nothing consumed lost or repeated; each restart resumed from the last checkpoint."""
  bad = []
  run_dir = pathlib.Path(soak["run_dir"])
  final = soak["runs"][-1]["ckpt"]
  steps = sorted({r["step"] for r in timeline})
  if steps != list(range(1, final + 1)):
    bad.append(f"the timeline's steps {steps[:3]}..{steps[-3:]} are not 1..{final}")
  seen = collections.Counter(r["index"] for r in timeline)
  bad += [f"index {i} consumed {n} times" for i, n in seen.items() if n > 1]
  data = run_dir / "ckpt" / str(final) / "data" / "metadata"
  if final and data.exists():
    pos = json.loads(data.read_text())
    consumed = set(range(pos["next"])) | set(pos["done"])
    if consumed != set(seen):
      lost, extra = sorted(consumed - set(seen)), sorted(set(seen) - consumed)
      bad.append(
        f"checkpoint {final}'s position != the timeline: lost {lost[:5]} extra {extra[:5]}"
      )
  for prev, nxt in itertools.pairwise(soak["runs"]):
    log = pathlib.Path(nxt["log"]).read_text(errors="replace")
    if prev["ckpt"] and f"resumed from step {prev['ckpt']}" not in log:
      bad.append(f"run {nxt['tag']} did not resume from checkpoint {prev['ckpt']}")
    own = [r["step"] for r in _parsed(lines[nxt["first_line"] : nxt["end_line"]])]
    if own and min(own) != prev["ckpt"] + 1:
      bad.append(f"run {nxt['tag']}'s first step is {min(own)}, not {prev['ckpt'] + 1}")
  return bad


def _check_leftovers(soak: dict) -> tuple[list[str], bool]:
  """After each killed owner (a trainer; the cluster soak's sandbox hosts: `sweeps`) and its
  successor's start, none of its markers; none of anyone's after the soak."""
  bad, exercised = [], False
  for ev in soak["events"]:
    if ev["kind"] != "trainer_kill" and not ev.get("sweeps"):
      continue
    after = ev.get("leftovers_after_next_start")
    if after is None:
      bad.append(f"{ev['kind']} of {ev['tag']}: its successor never started: leftovers unchecked")
      continue
    exercised = True
    if sum(after.values()):
      bad.append(f"after killing {ev['tag']} and the next start: {after}")
  if sum(soak["leftovers_at_end"].values()):
    bad.append(f"after the soak: {soak['leftovers_at_end']}")
  return bad, exercised


def _check_lifetime(soak: dict) -> tuple[list[str], int]:
  limit = int(soak["options"]["lifetime_s"])
  seen = [s for s in soak["samples"]["lifetime"] if s["lifetime_s"] != faults.GONE]
  bad = [
    f"sandbox {s['sandbox']}: lifetime enforcer {s['lifetime_s']}"
    for s in seen
    if s["lifetime_s"] is None or s["lifetime_s"] > limit
  ]
  return bad, len(seen)


def _check_overload(soak: dict, failures: list[dict], server_logs: list[pathlib.Path]) -> tuple:
  bad = [u for u in soak["unexpected"] if u.startswith("server")]
  for log in server_logs:
    if "Traceback" in (log.read_text(errors="replace") if log.exists() else ""):
      bad.append(f"the server logged a traceback ({log})")
  for f in failures:
    if f["kind"] == "exception" or (f["kind"] == "server" and not f["cause"]):
      bad.append(f"episode failed without a fault to explain it: {f['message'][:300]}")
  waiting = max((s["waiting"] for s in soak["samples"]["status"]), default=0)
  return bad, waiting


def _process_rows(soak: dict, failures: list[dict]) -> dict:
  rows = {}
  progress = soak["samples"]["progress"]
  for kind in soak.get("kinds", PROCESS_KINDS):
    evs = [e for e in soak["events"] if e["kind"] == kind]
    recovered = 0
    for ev in evs:  # the loop made a step it had not made before the fault
      later = [s for t, s in progress if t > ev["at"]]
      ok = bool(later) and max(later) > ev["step"]
      if kind == "trainer_kill" or ev.get("sweeps"):  # ... and the successor reaped its sandboxes
        ok = ok and "leftovers_after_next_start" in ev
      if ev.get("awaits_restart"):  # ... and what was killed is back (Ray restarted it)
        ok = ok and "restarted_at" in ev
      recovered += int(ok)
    dropped = sum(1 for f in failures if f["cause"] == kind)
    rows[kind] = {"injected": len(evs), "recovered": recovered, "dropped": dropped, "scored": "-"}
  return rows


def _check_replicas(final: dict) -> tuple[list[str], bool]:
  """{"step": the last step, "replicas": the router's view of each} -> every live replica at that
  step's version (a restarted one got the current weights), at least one live."""
  live = [r for r in final["replicas"] if r["live"]]
  bad = [
    f"replica {r['address']} at version {r['version']}"
    for r in live
    if r["version"] != final["step"]
  ]
  if not live:
    bad.append(f"no live replica at the end: {final['replicas']}")
  return bad, final["step"] > 0


def analyze(soak: dict) -> dict:
  run_dir = pathlib.Path(soak["run_dir"])
  lines = _lines(run_dir / "rollouts.jsonl")
  records = _parsed(lines)
  failures = [{**f, "cause": _attribute(f, soak["events"])} for r in records for f in r["failures"]]
  scoring_bad, task_rows = _check_scoring(soak, records)
  position_bad = _check_position(soak, _timeline(soak, lines), lines)
  leftover_bad, killed = _check_leftovers(soak)
  lifetime_bad, inspected = _check_lifetime(soak)
  server_logs = [pathlib.Path(p) for p in soak.get("server_logs", [soak_dir(soak) / "server.log"])]
  overload_bad, waiting = _check_overload(soak, failures, server_logs)
  survive_bad = [u for u in soak["unexpected"] if u.startswith("trainer")]
  invariants = {
    "infra_never_scored": _verdict(scoring_bad, bool(records)),
    "exact_position_after_restarts": _verdict(position_bad, len(soak["runs"]) > 1),
    "no_leftovers": _verdict(leftover_bad, killed),
    "hard_lifetime": _verdict(lifetime_bad, inspected > 0),
    "server_overload": _verdict(overload_bad, waiting > 0),
    "loop_survives": _verdict(survive_bad, max_step(run_dir / "metrics.jsonl") > 0),
  }
  if "replicas" in soak:  # the cluster soak: every live replica serves the final version
    invariants["replicas_at_final_version"] = _verdict(*_check_replicas(soak["replicas"]))
  rows = {k: dict(task_rows[k]) for k in tasks.EXPECTED if k in task_rows}
  rows.update(_process_rows(soak, failures))
  window = soak["window"]
  minutes = max((window[1] or window[0]) - window[0], 1.0) / 60.0
  episodes = sum(len(r["episodes"]) + len(r["failures"]) for r in records)
  return {
    "rows": rows,
    "invariants": invariants,
    "episodes": episodes,
    "episodes_per_min": round(episodes / minutes, 1),
    "unexplained_failures": [f for f in failures if not f["cause"]][:20],
    "max_waiting_requests": waiting,
    "lifetimes_inspected": inspected,
    "wall_s": soak["wall_s"],
    "held": all(v["result"] != "broken" for v in invariants.values()),
  }


def soak_dir(soak: dict) -> pathlib.Path:
  return pathlib.Path(soak["run_dir"]).parent


def _verdict(bad: list[str], exercised: bool) -> dict:
  result = "broken" if bad else ("held" if exercised else "not exercised")
  return {"result": result, "evidence": bad[:10]}


def table(result: dict) -> str:
  """The per-kind table and the invariants, as printed."""
  out = [f"{'fault kind':<18}{'injected':>9}{'recovered':>10}{'dropped (infra)':>16}{'scored':>8}"]
  for kind, row in result["rows"].items():
    out.append(
      f"{kind:<18}{row.get('injected', 0):>9}{row.get('recovered', 0):>10}"
      f"{row.get('dropped', 0):>16}{row.get('scored', 0):>8}"
    )
  out.append("")
  out.append(f"{'invariant':<32}result")
  for name, v in result["invariants"].items():
    out.append(f"{name:<32}{v['result']}")
    out += [f"    {line}" for line in v["evidence"][:3]]
  out.append("")
  out.append(
    f"episodes {result['episodes']} ({result['episodes_per_min']}/min), server queue max "
    f"{result['max_waiting_requests']}, lifetimes inspected {result['lifetimes_inspected']}, "
    f"wall {result['wall_s']} s"
  )
  return "\n".join(out)
