"""The task vocabulary: domains, verifier kinds, fixtures and task complexities, defined once.

The TMAX-15K generator (generator/taxonomy.json + axes.py), the procedural library
(procedural/core.py) and the verifier writers (verifiers.KINDS) all read these tuples; the values
are the recipe's (shared/docs/recipe.md, "TMAX-15K task generation"). Task metadata written
before the vocabulary was shared may use an older spelling: `canonical(field, value)` maps it
(tasks/loader.py applies it when a task is loaded).
"""

from __future__ import annotations

DOMAINS = (
  "security",
  "software_engineering",
  "file_operations",
  "data_querying",
  "data_science",
  "debugging",
  "scientific_computing",
  "data_processing",
  "system_administration",
)

# kind -> what the hidden tests check (the knob in brackets)
VERIFIERS = {
  "exact_text": "the output equals the ground truth [strictness]",
  "metric_threshold": "a metric meets a threshold [the threshold]",
  "adversarial_corpus": "every malicious item rejected, every benign one kept [corpus size]",
  "fuzz_equivalence": "bit-exact agreement with a reference on N random inputs [N, inputs]",
  "multi_protocol": "a service the agent starts answers real protocol requests [probes]",
}
VERIFIER_KINDS = tuple(VERIFIERS)

# fixture -> how the task's inputs reach the agent (the LLM generator's prompt hint)
FIXTURES = {
  "text_only": "plain text files",
  "image": "information the agent must recover from an image with OCR",
  "audio": "information in an audio file",
  "video": "information in a video file",
  "stripped_binary": "a stripped executable to analyse",
  "vendored_package": "a vendored source package",
  "multi_service_compose": "several cooperating local services",
}
FIXTURE_NAMES = tuple(FIXTURES)

# task complexity -> roughly how many commands a good agent needs
TASK_COMPLEXITY = {
  "short": "a few commands",
  "moderate": "about 10-20 commands",
  "complex": "20-30 commands across several files",
  "intricate": "30-60 commands, several stages",
}
TASK_COMPLEXITIES = tuple(TASK_COMPLEXITY)

VOCABULARY = {
  "domain": DOMAINS,
  "verifier": VERIFIER_KINDS,
  "fixture": FIXTURE_NAMES,
  "task_complexity": TASK_COMPLEXITIES,
}

# older spellings in task metadata -> the vocabulary's (procedural tasks said "multi_service")
ALIASES = {"fixture": {"multi_service": "multi_service_compose"}}


def canonical(field: str, value):
  """`value` of metadata `field` in the vocabulary's spelling (unknown values pass unchanged)."""
  aliases = ALIASES.get(field, {})
  return aliases.get(value, value) if isinstance(value, str) else value


def canonical_metadata(metadata):
  """Task metadata with every aliased vocabulary field in the current spelling (same object when
  nothing changes)."""
  fixed = {k: canonical(k, metadata[k]) for k in ALIASES if k in metadata}
  if all(fixed[k] == metadata[k] for k in fixed):
    return metadata
  return {**metadata, **fixed}


def check(field: str, value, where: str) -> str:
  """`value` if it is in the vocabulary of `field`, else a ValueError naming `where`."""
  allowed = VOCABULARY[field]
  if value not in allowed:
    raise ValueError(
      f"{where}: {field} {value!r} is not in tasks/vocabulary.py; expected one of {allowed}"
    )
  return value
