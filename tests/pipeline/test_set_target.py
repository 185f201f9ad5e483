"""The calibrated set against the recipe's set-level target (pipeline/set_target.py): the set's
pass@1 / pass@k / pass@8 from the trial records, the greedy selection toward the target, and
calibration's cost in report.json, through the pipeline with a scripted writer and a reference
policy on loopback whose passes per task are chosen, real sandboxes and builds."""

import json

import pytest
from pipeline_helpers import argv, states, taxonomy

from tests.conftest import require_base_rootfs
from tmax_jax.pipeline import __main__ as cli
from tmax_jax.pipeline import scripted, set_target
from tmax_jax.pipeline.config import CalibrationConfig
from tmax_jax.tasks import sources
from tmax_jax.tasks.generator.axes import load_taxonomy, sample_axes


def _state(tid: str, *rounds: list[float]) -> dict:
  trials = [[{"reward": r, "duration_s": 0.5} for r in rewards] for rewards in rounds]
  return {"id": tid, "stages": {}, "calibration": {"rounds": [{"trials": t} for t in trials]}}


def test_set_figures_are_the_mean_unbiased_estimates_of_the_last_round():
  # k = 10: c = 10, 1, 0 in the last round; task b's round 0 (all passed) is not counted
  done = [
    _state("a", [1.0] * 10),
    _state("b", [1.0] * 10, [1.0] + [0.0] * 9),
    _state("c", [0.0] * 10),
  ]
  cal = CalibrationConfig(k=10)
  target = set_target.targets(cal)
  assert target == {"pass@1": 0.42, "pass@8": 0.53}
  table = set_target.per_task(set_target.last_round_rewards(done), cal.k)
  fig = set_target.figures(table, cal.k, target)
  # b: pass@8 = 1 - C(9, 8) / C(10, 8) = 1 - 9/45 = 0.8
  assert fig["tasks"] == 3
  assert fig["pass@1"] == pytest.approx((1 + 0.1 + 0) / 3)
  assert fig["pass@8"] == pytest.approx((1 + 0.8 + 0) / 3)
  assert fig["pass@10"] == pytest.approx(2 / 3)
  assert fig["gap"] == {
    "pass@1": pytest.approx(1.1 / 3 - 0.42),
    "pass@8": pytest.approx(1.8 / 3 - 0.53),
  }
  rounds = set_target.per_round(done, cal.k, target)
  assert [(r["round"], r["tasks"]) for r in rounds] == [(0, 3), (1, 1)]
  assert rounds[0]["pass@1"] == pytest.approx(2 / 3) and rounds[1]["pass@1"] == pytest.approx(0.1)
  assert rounds[1]["gap"]["pass@8"] == pytest.approx(0.8 - 0.53)
  # k < 8: pass@8 is neither estimated nor targeted
  short = CalibrationConfig(k=4)
  assert set_target.targets(short) == {"pass@1": 0.42}
  fig4 = set_target.figures(
    set_target.per_task({"a": [1.0, 0.0, 0.0, 0.0]}, 4), 4, {"pass@1": 0.42}
  )
  assert set(fig4) == {"tasks", "pass@1", "pass@4", "gap"} and fig4["pass@4"] == 1.0
  assert set_target.figures({}, 4, {"pass@1": 0.42})["pass@1"] is None


def test_selection_drops_greedily_toward_the_target_within_its_budget():
  def table(**p1):
    return {t: {"pass@1": v} for t, v in p1.items()}

  five = table(a=1.0, b=1.0, c=0.5, d=0.25, e=0.0)  # mean 0.55
  goal = {"pass@1": 0.42}
  # drop a 1.0 (mean 0.4375; the tie between a and b goes to a), then c (mean 0.4167)
  assert set_target.select(five, goal, 0.5) == ["a", "c"]
  assert set_target.select(five, goal, 0.2) == ["a"]  # floor(0.2 * 5) = 1
  assert set_target.select(five, goal, 0.0) == []
  assert set_target.select(table(a=1.0, b=1.0, c=1.0), goal, 0.9) == []  # nothing moves the mean
  assert set_target.select(table(a=1.0), goal, 0.9) == []  # never the last task
  assert set_target.select(table(a=0.4, b=0.0), goal, 0.5) == ["b"]  # too hard: drops the hard
  # with pass@8: both figures count; x matches the target's shape, y is solved every time and
  # z never, so the set needs both x and z
  two = {
    "x": {"pass@1": 0.8, "pass@8": 1.0},
    "y": {"pass@1": 1.0, "pass@8": 1.0},
    "z": {"pass@1": 0.0, "pass@8": 0.0},
  }
  assert set_target.select(two, {"pass@1": 0.42, "pass@8": 0.53}, 0.5) == ["y"]


@pytest.mark.parametrize(
  ("flags", "message"),
  [
    (["--set_max_drop", 1], "calibration.set_max_drop=1.0: expected 0 <= it < 1"),
    (["--target_pass_at_1", 0.6, "--target_pass_at_8", 0.5], "expected 0 <= pass@1 <= pass@8"),
    (["--calibrate_price_in", -1], "price_per_mtok_in=-1.0"),
  ],
)
def test_bad_target_flags_are_one_line_errors(tmp_path, capsys, flags, message):
  with pytest.raises(SystemExit) as exit_:
    cli.main(argv("http://127.0.0.1:9/v1", tmp_path / "out", *flags))
  assert exit_.value.code == 2 and message in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def _completion(content: str, prompt_tokens: int, completion_tokens: int) -> bytes:
  """A chat completion reporting the given usage (the scripted endpoint reports zeros)."""
  return json.dumps(
    {
      "id": "scripted",
      "object": "chat.completion",
      "created": 0,
      "model": "scripted",
      "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
      ],
      "usage": {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
      },
    }
  ).encode()


@pytest.mark.slow  # 16 s on the loaded 2-core machine: 4 tasks built, validated, calibrated
def test_report_gives_set_figures_selection_and_cost(tmp_path, capsys):
  require_base_rootfs()
  from tmax_jax.agents.episode import EpisodeConfig
  from tmax_jax.agents.worker import episode_seed
  from tmax_jax.tokenizers import load_tokenizer

  tax = taxonomy(tmp_path, fixtures=("text_only",), verifiers=("exact_text",))
  names = sorted(f"{sample_axes(0, i, load_taxonomy(tax)).id}-exact-text-task" for i in range(4))
  passes = dict(zip(names, (2, 2, 1, 0), strict=True))  # of k = 2: pass@1 1, 1, 0.5, 0
  # round 0's episode seeds -> whether that episode plays the solution (else it submits at once)
  good = {episode_seed(0, n, 0, i): i < passes[n] for n in names for i in range(2)}
  policy = scripted.ScriptedPolicy(
    load_tokenizer("qwen3"), EpisodeConfig(family="qwen3"), p_good=1.0
  )
  calls = []

  def reference(body: dict) -> scripted.Answer:
    calls.append(body)
    first = not any(m["role"] == "assistant" for m in body["messages"])
    if first and not good[body["seed"]]:
      text = policy.harness.submit_text(policy.tok, policy.cfg)
    else:
      text = policy(body)
    return scripted.Answer(body=_completion(text, 1000, 10))

  out = tmp_path / "out"
  flags = ["--n", 4, "--taxonomy", tax, "--k", 2, "--band", 0, 1, "--set_max_drop", 0.5]
  flags += ["--calibrate_price_in", 2.0, "--calibrate_price_out", 8.0]
  with scripted.ScriptedEndpoint(scripted.route(scripted.ScriptedWriter(), reference)) as ep:
    assert cli.main(argv(ep.base_url, out, *flags)) == 0
  printed = capsys.readouterr().out
  report = json.loads((out / "report.json").read_text())
  section, spent = report["calibration"]["set"], report["calibration"]["cost"]
  # all four calibrated at their first setting: pass@1 (1 + 1 + 0.5 + 0) / 4, pass@2 3/4
  assert section["targeted"] == ["pass@1"] and section["target"]["pass@8"] == 0.53
  assert section["calibrated"]["pass@1"] == pytest.approx(0.625)
  assert section["calibrated"]["pass@2"] == pytest.approx(0.75)
  assert section["calibrated"]["gap"]["pass@1"] == pytest.approx(0.625 - 0.42)
  # the selection drops one always-solved task (mean 0.5); dropping another would not help
  by_name = {s["stages"]["write"]["name"]: s for s in states(out).values()}
  assert section["selection"]["dropped"] == [by_name[names[0]]["id"]]
  assert section["published"]["tasks"] == 3
  assert section["published"]["pass@1"] == pytest.approx(0.5)
  assert abs(section["published"]["gap"]["pass@1"]) < abs(section["calibrated"]["gap"]["pass@1"])
  assert report["kept"] == 3 and report["rejections"] == {"select:off_target": 1}
  (rejected,) = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
  assert rejected["stage"] == "select" and "pass@1 1.000" in rejected["reason"]
  assert sorted(t.name for t in sources.load_tasks(out / "published")) == names[1:]
  # the cost: every episode, the endpoint's usage at the given prices
  total = spent["total"]
  assert total["episodes"] == 8 and total["requests"] == len(calls)
  assert total["prompt_tokens"] == 1000 * len(calls) and total["completion_tokens"] == 10 * len(
    calls
  )
  assert total["cost_usd"] == pytest.approx(len(calls) * (1000 * 2.0 + 10 * 8.0) / 1e6)
  assert total["episode_seconds"] > 0
  assert spent["per_kept_task"]["episodes"] == pytest.approx(8 / 3)
  assert "reference policy over the 3 published tasks: pass@1 0.500 (target 0.42" in printed
  assert "calibration cost: 8 episodes" in printed
  # every publish selects afresh: report-only gives the dropped task back
  with scripted.ScriptedEndpoint(scripted.route(scripted.ScriptedWriter(), reference)) as ep:
    flags = [*flags[:-4], "--set_max_drop", 0, "--resume"]
    assert cli.main(argv(ep.base_url, out, *flags)) == 0
  report = json.loads((out / "report.json").read_text())
  assert report["kept"] == 4 and report["rejections"] == {}
  assert report["calibration"]["set"]["published"]["pass@1"] == pytest.approx(0.625)
  assert report["calibration"]["cost"]["total"]["episodes"] == 8  # nothing replayed
  assert all("select" not in s["stages"] for s in states(out).values())
