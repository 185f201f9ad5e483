"""The task pipeline (tmax_jax/pipeline) against a scripted OpenAI-compatible writer and reference
policy served over real HTTP on loopback (aiohttp), real sandboxes and real image builds:
unusable endpoints fail loudly, an endpoint dying mid-run stops the run and a resumed run redoes
nothing that finished, every stage's rejections carry their reason, decontamination against a
benchmark dir, and calibration moving a task out of "always solved" by its knob. The 40-task run
killed with SIGKILL and resumed is tests/pipeline/test_pipeline_e2e.py (slow)."""

import json
import socket

import pytest
from pipeline_helpers import CLIENT_TIMEOUT_S, LATE, argv, stage_records, states, taxonomy

from tests.conftest import require_base_rootfs
from tmax_jax.errors import UserError
from tmax_jax.pipeline import __main__ as cli
from tmax_jax.pipeline import scripted, templates
from tmax_jax.pipeline.state import Store
from tmax_jax.tasks import difficulty, generate_llm, sources
from tmax_jax.tasks.format import load_task
from tmax_jax.tasks.generator.axes import load_taxonomy, sample_axes


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_unusable_endpoints_fail_loudly(tmp_path, capsys):
  dead = f"http://127.0.0.1:{_closed_port()}/v1"
  assert cli.main(argv(dead, tmp_path / "a", "--n", 2)) == 2
  assert "endpoint unusable" in capsys.readouterr().err
  assert not (tmp_path / "a").exists()  # nothing started
  gen = ["--base-url", dead, "--model", "m", "--n", "1", "--out", str(tmp_path / "g")]
  with pytest.raises(UserError, match="endpoint unusable"):  # cli.run: `error: ...`, exit 2
    generate_llm.main(gen)
  with scripted.ScriptedEndpoint(scripted.ScriptedWriter()) as ep:
    bad_model = argv(ep.base_url, tmp_path / "b", "--n", 2)
    bad_model[bad_model.index("--model") + 1] = "other"
    assert cli.main(bad_model) == 2
  assert "model 'other' is not served" in capsys.readouterr().err


def test_endpoint_dying_mid_run_stops_then_resume_redoes_nothing(tmp_path, capsys):
  healthy = scripted.ScriptedWriter()
  dying = scripted.ScriptedWriter(
    lambda p: ["ok"] if p in first_two else [scripted.Answer(status=503)]
  )
  first_two = {scripted.sample_key(sample_axes(0, i)) for i in range(2)}
  out, common = tmp_path / "out", ["--until", "write", "--n", 6, "--workers", 1]
  with scripted.ScriptedEndpoint(dying) as ep:
    flags = argv(ep.base_url, out, *common, "--max-retries", 1, "--max-endpoint-failures", 2)
    assert cli.main(flags) == 3
  err = capsys.readouterr().err
  assert "stopped: endpoint unusable (2 consecutive task(s) failed on it)" in err
  assert "HTTP 503" in err and "--resume" in err
  first = stage_records(out)
  statuses = sorted(r["status"] for r in first.values())
  assert statuses == ["done", "done", "error", "error"]  # two written, two failed, none rejected
  with scripted.ScriptedEndpoint(healthy) as ep:
    assert cli.main(argv(ep.base_url, out, *common)) == 2  # a used dir needs --resume
    assert "pass --resume" in capsys.readouterr().err
    assert cli.main(argv(ep.base_url, out, *common, "--resume", "--seed", 1)) == 2
    assert "same samples" in capsys.readouterr().err
    with Store(out).locked():
      assert cli.main(argv(ep.base_url, out, *common, "--resume")) == 2
    assert "another pipeline run" in capsys.readouterr().err
    assert cli.main(argv(ep.base_url, out, *common, "--resume")) == 0
  second = stage_records(out)
  assert len(second) == 6 and all(r["status"] == "done" for r in second.values())
  for key, rec in first.items():
    if rec["status"] == "done":
      assert second[key] == rec  # kept as it was, not redone
  assert not set(healthy.calls) & first_two  # the healthy writer never saw the first two
  assert all(second[k]["run"] == 2 for k in second if first.get(k, {}).get("status") != "done")


def test_a_stage_that_raises_is_an_error_the_next_run_retries(tmp_path, capsys):
  require_base_rootfs()
  tax = taxonomy(tmp_path, fixtures=("text_only",))
  out, common = tmp_path / "out", ["--n", 3, "--taxonomy", tax, "--no-calibrate"]
  with scripted.ScriptedEndpoint(scripted.ScriptedWriter()) as ep:
    assert cli.main(argv(ep.base_url, out, *common, "--until", "write")) == 0
    broken = Store(out).task_dir(sample_axes(0, 1, load_taxonomy(tax)).id) / "task.toml"
    good = broken.read_text()
    broken.write_text("[task\n")
    assert cli.main(argv(ep.base_url, out, *common, "--until", "build", "--resume")) == 3
    assert "1 task(s) failed" in capsys.readouterr().err
    rec = stage_records(out)[(sample_axes(0, 1, load_taxonomy(tax)).id, "build")]
    assert rec["status"] == "error" and rec["category"] == "exception"
    assert rec["reason"].startswith("TaskFormatError") and "task.toml" in rec["reason"]
    broken.write_text(good)
    assert cli.main(argv(ep.base_url, out, *common, "--until", "build", "--resume")) == 0
  assert all(r["status"] == "done" for r in stage_records(out).values())


def _bench_with(instruction: str, root):
  task = root / "bench" / "leaked-task"
  task.mkdir(parents=True)
  (task / "instruction.md").write_text(instruction)
  return root / "bench"


@pytest.mark.slow  # 12 s
def test_every_stage_rejects_with_its_reason_and_resume_continues(tmp_path):
  require_base_rootfs()
  tax = taxonomy(tmp_path, fixtures=("text_only", "stripped_binary"))
  samples = [sample_axes(0, i, load_taxonomy(tax)) for i in range(9)]
  plan = {
    0: [scripted.Answer(status=429), "malformed", "ok"],
    1: [LATE, "ok"],
    2: [scripted.Answer(body=b"{not json"), "ok"],
    3: ["build_fail"],
    4: ["smoke_fail"],
    5: ["oracle_fail"],
    6: ["noop_pass"],
    7: ["malformed"],
    8: ["ok"],  # the only exact_text task: its instruction is in the benchmark
  }
  writer = scripted.ScriptedWriter(
    lambda p: plan[[scripted.sample_key(s) for s in samples].index(p)]
  )
  leaked = samples[8]
  assert [s.verifier for s in samples].count("exact_text") == 1
  bench = _bench_with(templates.TEMPLATES[leaked.verifier]["instruction"], tmp_path)
  out = tmp_path / "out"
  base = ["--n", 9, "--taxonomy", tax, "--no-calibrate", "--max-retries", 2]
  base += ["--timeout-s", CLIENT_TIMEOUT_S]
  with scripted.ScriptedEndpoint(writer) as ep:
    assert cli.main(argv(ep.base_url, out, *base, "--until", "validate")) == 0
    after_validate = stage_records(out)
    assert not (out / "published").exists()
    flags = argv(ep.base_url, out, *base, "--resume", "--benchmark", bench)
    assert cli.main(flags) == 0
  final = stage_records(out)
  assert {k: v for k, v in final.items() if k in after_validate} == after_validate
  by_index = {s["index"]: s for s in states(out).values()}
  expected = {
    3: ("build", "build_failed"),
    4: ("validate", "smoke"),
    5: ("validate", "oracle"),
    6: ("validate", "noop_passes"),
    7: ("write", "reply"),
    samples.index(leaked): ("decontaminate", "contaminated"),
  }
  report = json.loads((out / "report.json").read_text())
  for i, s in by_index.items():
    rej = [
      (st, r["category"], r["reason"]) for st, r in s["stages"].items() if r["status"] != "done"
    ]
    if i in expected:
      assert [r[:2] for r in rej] == [expected[i]], (i, rej)
      assert rej[0][2], "every rejection has its reason"
    else:
      # 429 and the timeout are retried inside the client; a reply that is not a task and a
      # body that is not JSON each cost an attempt
      assert rej == [] and s["stages"]["write"]["attempts"] == {0: 2, 1: 1, 2: 2}[i], (i, s)
  assert "leaked-task" in by_index[samples.index(leaked)]["stages"]["decontaminate"]["reason"]
  assert report["kept"] == 9 - len(expected) and report["rejected"] == len(expected)
  assert report["decontamination"] == {"benchmarks": {"bench": 1}, "contaminated": 1}
  assert "exit 3" in by_index[3]["stages"]["build"]["reason"]
  rejected = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
  assert sorted(r["id"] for r in rejected) == sorted(samples[i].id for i in expected)
  published = sources.load_tasks(out / "published")
  assert len(published) == report["kept"]
  assert all(t.name.startswith("tmax-s0-") for t in published)
  assert "fixture" in report["axes"] and "table.txt" in {p.name for p in out.iterdir()}


def test_calibration_moves_a_task_out_of_always_solved(tmp_path):
  require_base_rootfs()
  from tmax_jax.agents.episode import EpisodeConfig
  from tmax_jax.agents.worker import episode_seed
  from tmax_jax.tokenizers import load_tokenizer

  tax = taxonomy(tmp_path, fixtures=("text_only",), verifiers=("exact_text",))
  name = f"{sample_axes(0, 0, load_taxonomy(tax)).id}-exact-text-task"
  policy = scripted.ScriptedPolicy(
    load_tokenizer("qwen3"), EpisodeConfig(family="qwen3"), p_good=0.5
  )

  def good(seed: int, rnd: int) -> int:  # episodes of round `rnd` that play the solution
    return sum(policy.good(episode_seed(seed, name, rnd, i)) for i in range(4))

  seed = next(s for s in range(100) if 0 < good(s, 2) < 4)  # a seed whose round 2 is mixed
  out = tmp_path / "out"
  with scripted.ScriptedEndpoint(scripted.route(scripted.ScriptedWriter(), policy)) as ep:
    flags = argv(ep.base_url, out, "--n", 1, "--taxonomy", tax, "--k", 4, "--rounds", 3)
    assert cli.main([*flags, "--calibrate-seed", str(seed)]) == 0
  (state,) = states(out).values()
  rounds = state["calibration"]["rounds"]
  # the template's near miss (trailing spaces) passes at strictness 0 and 1: always solved;
  # strictness 2 (byte-exact) fails it, so the seeded mix of solution and near miss is in band
  assert [r["setting"] for r in rounds] == [f"exact_text:strictness={i}" for i in (0, 1, 2)]
  assert [r["pass@1"] for r in rounds] == [1.0, 1.0, good(seed, 2) / 4]
  assert state["stages"]["calibrate"]["setting"] == "exact_text:strictness=2"
  task = load_task(out / "published" / "tasks" / state["stages"]["write"]["name"])
  assert json.loads(task.tests["spec.json"])["strictness"] == 2
  cal = json.loads((out / "calibration" / "calibration.json").read_text())
  assert cal["histogram"]["before"][-1] == 1 and cal["histogram"]["after"][-1] == 0
  assert set(cal["per_knob_setting"]) == {r["setting"] for r in rounds}
  assert (out / "calibration" / "pass_at_1.png").read_bytes()[:4] == b"\x89PNG"
  rollouts = difficulty.load_rollouts(out / "calibration" / "final_rollouts.jsonl")
  table = difficulty.per_task_pass_at_k(rollouts, ks=(1, 4))
  assert table[task.name]["pass@1"] == rounds[2]["pass@1"] and table[task.name]["n"] == 4
