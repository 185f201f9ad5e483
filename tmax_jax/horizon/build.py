"""TerminalHorizon build: stage 1 (environment construction + audit) and stage 2 (extension).

  python3 -m tmax_jax.horizon.build --out runs/horizon --chains photo_sync --seeds 0 1
  python3 -m tmax_jax.horizon.build --out runs/horizon --mode llm \
      --base_url http://127.0.0.1:8000/v1 --model M [--num_seeds 25 --branches 2]

Procedural mode walks the extension chains' trees (no model; a node whose audit fails is
rejected, there is nobody to rebuild it). LLM mode writes a root task per professional seed, audits
it, and feeds the evidence of a failed audit back for up to `rebuild_rounds` rebuilds; every kept
node is then extended `branches` times (each child audited and rebuilt the same way) until
`max_generations`. A child of a rejected node is skipped. The build resumes from <out>/build.jsonl.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Callable

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.horizon import audit, authoring, compose, offline, record
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.generator import llm, pipeline
from tmax_jax.tasks.procedural import chains as chains_lib
from tmax_jax.tasks.procedural import registry
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.tokenizers import load_tokenizer


@dataclasses.dataclass(frozen=True)
class BuildConfig:
  out: str
  mode: str = "procedural"  # procedural | llm
  chains: tuple[str, ...] = ()  # procedural: chain names ("" = every registered chain)
  seeds: tuple[int, ...] = (0,)
  level: int = 0
  max_generations: int = 3
  professional_seeds: str = ""  # llm: a seeds JSON ("" = the 25 shipped in seeds.json)
  num_seeds: int = 0  # 0 = all
  branches: int = 2  # llm: extensions requested per kept node
  rebuild_rounds: int = 2
  max_attempts: int = 3  # model calls per reply (malformed replies are retried with the error)
  audit: audit.AuditConfig = audit.AuditConfig()

  def __post_init__(self):
    if self.mode not in ("procedural", "llm"):
      raise ValueError(f"BuildConfig.mode={self.mode!r}; expected 'procedural' or 'llm'")
    if self.max_generations < 1:
      raise ValueError(f"BuildConfig.max_generations={self.max_generations}; expected >= 1")


class Builder:
  """Runs one build; `client` (generator.llm.ChatClient) is needed in llm mode only."""

  def __init__(
    self, cfg: BuildConfig, auditor: audit.Auditor, client: llm.ChatClient | None = None
  ):
    if cfg.mode == "llm" and client is None:
      raise UserError("llm mode needs a chat client (--base_url/--model)")
    self.cfg, self.auditor, self.client = cfg, auditor, client
    self.out = pathlib.Path(cfg.out)
    self.log = record.BuildLog(self.out)
    self.bar = None  # the build's progress bar (cli.progress) while it runs

  def run(self) -> dict:
    self.out.mkdir(parents=True, exist_ok=True)
    with cli.progress(desc="horizon build", unit="task") as self.bar:
      if self.cfg.mode == "procedural":
        self._procedural()
      else:
        self._llm()
    summary = record.summary(self.log.entries)
    record.write_json(self.out / "lineage.json", record.lineage_tree(self.log.entries))
    record.write_json(self.out / "summary.json", summary)
    return summary

  # ------------------------------------------------------------------------------ bookkeeping
  def _finish(
    self,
    line: compose.Lineage,
    status: str,
    reason: str,
    rounds: list[dict],
    task: fmt.Task | None = None,
  ) -> None:
    if task is not None and status in record.KEPT:
      record.save_task(
        self.out, task, {"lineage": line.to_json(), "status": status, "rounds": rounds}
      )
    self.log.append(record.node_entry(line, status, reason, len(rounds)))
    self.bar.update(1)
    counts = record.summary(self.log.entries)["counts"]
    self.bar.set_postfix({k: v for k, v in counts.items() if v})

  def _parent_status(self, line: compose.Lineage) -> str | None:
    return self.log.nodes().get(line.parent, {}).get("status") if line.parent else None

  # ------------------------------------------------------------------------------ procedural
  def _procedural(self) -> None:
    names = self.cfg.chains or tuple(sorted(registry.CHAINS))
    work = [(n, s) for n in names for s in self.cfg.seeds]
    gens = self.cfg.max_generations
    self.bar.total = sum(
      len(list(chains_lib.tree_paths(registry.get_chain(n), gens))) for n, _ in work
    )
    for name, seed in work:
      for node in offline.chain_tree(name, seed, self.cfg.level, self.cfg.max_generations):
        line = node.lineage
        if line.id in self.log.nodes():
          self.bar.update(1)
          continue
        if line.parent and self._parent_status(line) not in record.KEPT:
          self._finish(line, "skipped", f"parent {line.parent} was not kept", [])
          continue
        report = self.auditor.audit(node.task)
        status = "accepted" if report.passed else "rejected"
        self._finish(line, status, _reason(report), [report.to_json()], node.task)

  # ------------------------------------------------------------------------------ llm
  def _llm(self) -> None:
    seeds = authoring.load_seeds(self.cfg.professional_seeds or authoring.SEEDS_FILE)
    seeds = seeds[: self.cfg.num_seeds] if self.cfg.num_seeds else seeds
    done = self.log.nodes()
    for seed in seeds:
      if seed.id in done:
        continue
      self.bar.total = (self.bar.total or 0) + 1

      def make_root(draft: authoring.Draft, seed=seed) -> fmt.Task:
        line = compose.Lineage(
          id=seed.id,
          root=seed.id,
          generation=0,
          stage=draft.name,
          requirement=draft.stage.requirement,
          origin="llm",
          goal=draft.goal,
          source={"seed": seed.id, "job": seed.job},
        )
        meta = {"category": seed.domain, "difficulty": draft.difficulty}
        return compose.root_task(draft.stage, line, meta)

      self._llm_node(
        "build",
        authoring.build_messages(seed),
        make_root,
        compose.Lineage(seed.id, seed.id, 0, "", seed.job, origin="llm"),
      )
    self._expand_all()

  def _expand_all(self) -> None:
    while True:
      nodes, expanded = self.log.nodes(), self.log.expanded()
      frontier = sorted(
        i
        for i, e in nodes.items()
        if e["status"] in record.KEPT
        and e["generation"] < self.cfg.max_generations - 1
        and i not in expanded
      )
      if not frontier:
        return
      for nid in frontier:
        self._expand(fmt.load_task(record.task_dir(self.out, nid)))
        self.log.append({"event": "expanded", "id": nid})

  def _expand(self, parent: fmt.Task) -> None:
    pline = compose.lineage_of(parent)
    lineage = [
      compose.lineage_of(fmt.load_task(record.task_dir(self.out, a)))
      for a in _ancestors(pline.id, self.log.nodes())
    ] + [pline]
    siblings = [
      e["requirement"]
      for e in self.log.nodes().values()
      if e["parent"] == pline.id and e["status"] in record.KEPT
    ]
    self.bar.total = (self.bar.total or 0) + self.cfg.branches
    for _ in range(self.cfg.branches):
      taken = {i for i in self.log.nodes()}

      def make_child(draft: authoring.Draft) -> fmt.Task:
        # _llm_node calls this within the iteration, so `taken` is this iteration's set
        cid = _unique(f"{pline.id}.{draft.name}", taken)  # noqa: B023
        line = compose.Lineage(
          id=cid,
          root=pline.root,
          generation=pline.generation + 1,
          stage=draft.name,
          requirement=draft.stage.requirement,
          parent=pline.id,
          origin="llm",
          goal=pline.goal,
          source=dict(pline.source),
        )
        return compose.child_task(parent, draft.stage, line)

      placeholder = compose.Lineage(
        _unique(f"{pline.id}.ext", taken),
        pline.root,
        pline.generation + 1,
        "",
        "",
        parent=pline.id,
        origin="llm",
      )
      kept = self._llm_node(
        "extend", authoring.extend_messages(parent, lineage, siblings), make_child, placeholder
      )
      if kept is not None:
        siblings.append(kept.requirement)

  def _llm_node(
    self,
    kind: str,
    messages: list[dict],
    make: Callable[[authoring.Draft], fmt.Task],
    placeholder: compose.Lineage,
  ) -> compose.Lineage | None:
    """Ask -> build -> audit, rebuilding from the evidence; records the outcome."""
    rounds, line, task = [], placeholder, None
    for r in range(self.cfg.rebuild_rounds + 1):
      try:
        draft, _ = pipeline.ask_until_parsed(
          self.client, messages, lambda rep: authoring.parse_reply(rep, kind), self.cfg.max_attempts
        )
      except (llm.ReplyError, llm.ChatError) as err:
        self._finish(line, "rejected", f"reply: {type(err).__name__}: {err}", rounds)
        return None
      try:
        task = make(draft)
        line = compose.lineage_of(task)
        report = self._check(task, draft.smoke_test)
      except (ValueError, fmt.TaskFormatError) as err:
        report = audit.AuditReport(
          (audit.Check("build", False, (f"the task is malformed: {err}",)),)
        )
      rounds.append({"round": r, **report.to_json()})
      if report.passed:
        self._finish(line, "accepted" if r == 0 else "rebuilt", "ok", rounds, task)
        return line
      messages = messages + [
        {"role": "assistant", "content": draft.reply},
        authoring.rebuild_message(report.evidence(), r + 1),
      ]
    self._finish(line, "rejected", _reason(report), rounds)
    return None

  def _check(self, task: fmt.Task, smoke: str) -> audit.AuditReport:
    """The TMAX generator's checks (environment builds, smoke test, oracle scores 1), then the
    audit."""
    reason, _ = pipeline.build_and_check(
      task, smoke, pipeline.GenerationConfig(runner=self.cfg.audit.runner)
    )
    if reason is not None:
      return audit.AuditReport((audit.Check("build", False, (reason,)),))
    return self.auditor.audit(task)


def _reason(report: audit.AuditReport) -> str:
  if report.passed:
    return "ok"
  evidence = report.evidence()
  return evidence[0][:300] if evidence else "+".join(report.failed())


def _ancestors(nid: str, nodes: dict) -> list[str]:
  out, cur = [], nodes.get(nid, {}).get("parent")
  while cur:
    out.append(cur)
    cur = nodes.get(cur, {}).get("parent")
  return out[::-1]


def _unique(nid: str, taken: set[str]) -> str:
  if nid not in taken:
    return nid
  k = 2
  while f"{nid}-{k}" in taken:
    k += 1
  return f"{nid}-{k}"


def make_auditor(
  probe: str, family: str, audit_cfg: audit.AuditConfig, client: llm.ChatClient | None
) -> audit.Auditor:
  if probe == "endpoint":
    if client is None:
      raise UserError("--probe endpoint needs --base_url and --model")
    chosen = audit.EndpointProbe(client)
  elif probe == "shortcuts":
    chosen = audit.ShortcutProbe()
  else:
    raise ValueError(f"--probe {probe!r}: expected 'shortcuts' or 'endpoint'")
  return audit.Auditor(load_tokenizer(family), chosen, audit_cfg)


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--out", required=True, help="build directory (resumed from its build.jsonl)")
  p.add_argument(
    "--mode",
    default="procedural",
    choices=("procedural", "llm"),
    help="procedural: walk the extension chains; llm: a model writes and extends the tasks",
  )
  p.add_argument("--chains", nargs="*", default=[], help="procedural: chain names (none = all)")
  p.add_argument("--seeds", nargs="*", type=int, default=[0], help="procedural: chain seeds")
  p.add_argument("--level", type=int, default=0, help="procedural: difficulty level")
  p.add_argument(
    "--max_generations",
    type=int,
    default=BuildConfig.max_generations,
    help="generations of a lineage (the root is 1)",
  )
  p.add_argument(
    "--professional_seeds", default="", help="llm: a seeds JSON (empty: the 25 shipped ones)"
  )
  p.add_argument("--num_seeds", type=int, default=0, help="llm: first N seeds (0 = all)")
  p.add_argument(
    "--branches", type=int, default=BuildConfig.branches, help="llm: extensions per kept node"
  )
  p.add_argument(
    "--rebuild_rounds",
    type=int,
    default=BuildConfig.rebuild_rounds,
    help="llm: rebuilds of a node whose audit failed",
  )
  p.add_argument(
    "--probe",
    default="shortcuts",
    choices=("shortcuts", "endpoint"),
    help="the audit's shortcut probe: scripted shortcuts, or a model at --base_url",
  )
  p.add_argument(
    "--probe_attempts",
    type=int,
    default=audit.AuditConfig.probe_attempts,
    help="probe attempts per task",
  )
  p.add_argument("--family", default="qwen3", help="tokenizer / tool-call format of the probes")
  p.add_argument("--base_url", default="", help="OpenAI-compatible endpoint (llm mode, probe)")
  p.add_argument("--model", default="", help="model name the endpoint serves")
  p.add_argument("--api_key_env", default=None, help="environment variable holding the API key")
  p.add_argument("--backend", default=None, help="sandbox backend (default: the best available)")
  args = p.parse_args(argv)
  if args.mode == "llm" and args.professional_seeds:  # read before any endpoint is asked
    authoring.load_seeds(args.professional_seeds)
  client = None
  if args.base_url:
    cli.check_reachable("--base_url", args.base_url)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    client = llm.ChatClient(llm.ChatConfig(base_url=args.base_url, model=args.model, api_key=key))
  base = audit.AuditConfig()
  audit_cfg = dataclasses.replace(
    base,
    probe_attempts=args.probe_attempts,
    runner=RunnerConfig(backend=args.backend),
    probe_episode=dataclasses.replace(base.probe_episode, family=args.family),
  )
  cfg = BuildConfig(
    out=args.out,
    mode=args.mode,
    chains=tuple(args.chains),
    seeds=tuple(args.seeds),
    level=args.level,
    max_generations=args.max_generations,
    professional_seeds=args.professional_seeds,
    num_seeds=args.num_seeds,
    branches=args.branches,
    rebuild_rounds=args.rebuild_rounds,
    audit=audit_cfg,
  )
  auditor = make_auditor(args.probe, args.family, audit_cfg, client)
  summary = Builder(cfg, auditor, client).run()
  print(record.summary_table(summary))
  return 0


if __name__ == "__main__":
  cli.run(main)
