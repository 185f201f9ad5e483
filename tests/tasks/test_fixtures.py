"""The recipe's fixture kinds synthesised at build time as the writer prompt describes
(generator/fixtures.py RECIPES; the scripted writer's builds in pipeline/templates.py): each
task image builds on the project base, the validate stage's probe finds the fixture, and the
agent can recover its content with the base image's tools (tesseract, ffprobe, the binary
itself, pip). A missing fixture is rejected with its reason."""

import dataclasses

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.pipeline import templates
from tmax_jax.tasks import runner, vocabulary
from tmax_jax.tasks.format import write_task
from tmax_jax.tasks.generator import fixtures, llm
from tmax_jax.tasks.generator import pipeline as generator
from tmax_jax.tasks.generator.axes import sample_axes

RUNNER = runner.RunnerConfig(memory_mb=2048)
# fixture -> (command an agent runs, text its output must contain)
RECOVER = {
  "image": ("tesseract /workspace/note.png - 2>/dev/null", templates.IMAGE_TEXT),
  "audio": (
    "ffprobe -v error -show_entries stream=codec_type,sample_rate:format=duration "
    "-of default=nw=1 /workspace/tone.wav",
    "duration=2.0",
  ),
  "video": (
    "ffprobe -v error -show_entries stream=codec_type,width -of default=nw=1 /workspace/clip.mp4",
    "width=160",
  ),
  "stripped_binary": (
    "file /workspace/secret; /workspace/secret; nm /workspace/secret 2>&1",
    templates.BINARY_SECRET,
  ),
  "vendored_package": (
    "cd /workspace && python3 -m venv --system-site-packages /tmp/v && /tmp/v/bin/pip install "
    "-q --no-index --no-build-isolation ./vendor/tinylib 2>&1 | tail -3; /tmp/v/bin/python -c "
    "'import tinylib; print(\"answer\", tinylib.answer())'",
    "answer 42",
  ),
}


def _task(tmp_path, fixture: str):
  sample = dataclasses.replace(sample_axes(0, 0), verifier="exact_text", fixture=fixture)
  task, smoke = llm.parse_task_reply(templates.task_reply("exact_text", fixture), sample)
  return write_task(task, tmp_path / fixture, overwrite=True), smoke


@pytest.mark.parametrize("fixture", sorted(RECOVER))
def test_fixture_builds_probes_and_is_recoverable(tmp_path, fixture):
  require_base_rootfs()
  task, smoke = _task(tmp_path, fixture)
  reason, reward = generator.build_and_check(
    task, smoke, generator.GenerationConfig(runner=RUNNER), fixture
  )
  assert reason is None and reward == 1.0
  command, expected = RECOVER[fixture]
  outputs = {}

  def agent(sb):
    outputs["out"] = sb.run(command, timeout_s=120).output

  runner.run_trial(task, agent, RUNNER)
  assert expected in outputs["out"], outputs["out"]
  if fixture == "stripped_binary":
    assert ", stripped" in outputs["out"] and "no symbols" in outputs["out"]


def test_missing_fixtures_are_rejected_with_the_reason(tmp_path):
  require_base_rootfs()
  cfg = generator.GenerationConfig(runner=RUNNER)
  task, smoke = _task(tmp_path, "text_only")  # the sample asked for a fixture, none was made
  for fixture in ("image", "stripped_binary"):
    reason, _ = generator.build_and_check(task, smoke, cfg, fixture)
    assert reason == fixtures.probe_failure(fixture, "/workspace")
  reason, _ = generator.build_and_check(task, smoke, cfg, "multi_service_compose")
  assert reason.startswith("fixture multi_service_compose: expected environment/docker-compose")


def test_every_fixture_kind_has_a_recipe_and_a_check():
  for fixture in vocabulary.FIXTURE_NAMES:
    assert fixtures.RECIPES[fixture]
    prompt = llm.render_prompt(
      dataclasses.replace(sample_axes(0, 0), fixture=fixture, verifier="exact_text")
    )[0]["content"]
    assert f"Fixture ({fixture}): " in prompt and "$" not in prompt.split("Fixture")[1]
    has_probe = fixtures.probe_command(fixture, "/w") is not None
    assert has_probe == (fixture not in ("text_only", "multi_service_compose"))
