"""One task vocabulary: the generator's taxonomy, the procedural library and the verifier writers
read tasks/vocabulary.py, and metadata in an older spelling loads in the current one."""

import json

import pytest

from tmax_jax.tasks import loader, verifiers, vocabulary
from tmax_jax.tasks.format import write_task
from tmax_jax.tasks.generator import axes, llm
from tmax_jax.tasks.procedural import core, registry


def test_readers_share_the_vocabulary():
  tx = axes.default_taxonomy()
  assert tx.axes["domain"].values == vocabulary.DOMAINS == tuple(tx.domains)
  assert tx.axes["fixture"].values == vocabulary.FIXTURE_NAMES
  assert tx.axes["verifier"].values == vocabulary.VERIFIER_KINDS == verifiers.KINDS
  assert tx.axes["task_complexity"].values == vocabulary.TASK_COMPLEXITIES
  # the recipe's lists (shared/docs/recipe.md)
  assert "video" in vocabulary.FIXTURE_NAMES and "multi_service_compose" in vocabulary.FIXTURES
  assert len(vocabulary.DOMAINS) == 9 and len(vocabulary.VERIFIER_KINDS) == 5
  fams = registry.FAMILIES.values()
  assert {f.fixture for f in fams} <= set(vocabulary.FIXTURE_NAMES)
  sample = axes.sample_axes(0, 0)
  text = "".join(m["content"] for m in llm.render_prompt(sample))
  assert vocabulary.FIXTURES[sample.fixture] in text


def test_values_outside_the_vocabulary_are_named():
  build = registry.get_family("csv_aggregate").build
  with pytest.raises(
    ValueError,
    match=r"procedural family f: fixture 'multi_service' is not in "
    r"tasks/vocabulary.py",
  ):
    core.Family("f", "security", "exact_text", "multi_service", build)
  with pytest.raises(ValueError, match="task_complexity 'huge'"):
    core.TaskSpec(instruction="i", check="", solve="", wrong="", complexity="huge")
  with pytest.raises(ValueError, match="spec.kind"):
    verifiers.bundle({"kind": "eyeball"})


def test_taxonomy_takes_vocabulary_values_only_from_the_vocabulary(tmp_path):
  doc = json.loads(axes.TAXONOMY_FILE.read_text())
  doc["axes"]["fixture"]["values"] = ["text_only"]
  (tmp_path / "a.json").write_text(json.dumps(doc))
  with pytest.raises(axes.TaxonomyError, match=r"a.json: axes.fixture: expected \{weights"):
    axes.load_taxonomy(tmp_path / "a.json")
  doc = json.loads(axes.TAXONOMY_FILE.read_text())
  doc["domains"]["cooking"] = doc["domains"]["security"]
  (tmp_path / "b.json").write_text(json.dumps(doc))
  with pytest.raises(axes.TaxonomyError, match="b.json: domains.cooking: not a domain"):
    axes.load_taxonomy(tmp_path / "b.json")


def test_old_fixture_spelling_loads_in_the_current_one(tmp_path):
  task = registry.build_task("backend_gateway", 0, 0)
  assert task.config.metadata["fixture"] == "multi_service_compose"
  import dataclasses

  old = dataclasses.replace(
    task,
    config=dataclasses.replace(
      task.config, metadata={**task.config.metadata, "fixture": "multi_service"}
    ),
  )
  write_task(old, tmp_path / "old")
  loaded = loader.load_task_dir(tmp_path / "old")
  assert loaded.config.metadata["fixture"] == "multi_service_compose"
  assert loaded.config.metadata["family"] == "backend_gateway"
  assert vocabulary.canonical("fixture", "image") == "image"
