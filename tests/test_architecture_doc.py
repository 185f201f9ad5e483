"""docs/architecture.md's package map is the import-linter layers contract, written for people.

The map is what a newcomer reads; pyproject.toml's "tmax_jax layers" contract is what CI enforces.
These tests keep them one fact: adding a layer, moving a package or adding a top-level package of
tmax_jax/ without its line in the map fails here.
"""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
CONTRACT = "tmax_jax layers"


def contract_layers(pyproject: str) -> list[set[str]]:
  """The contract's layers, top first, each the set of its `|` siblings without `tmax_jax.`."""
  contracts = tomllib.loads(pyproject)["tool"]["importlinter"]["contracts"]
  (layers,) = [c["layers"] for c in contracts if c["name"] == CONTRACT]
  return [{name.strip().removeprefix("tmax_jax.") for name in layer.split("|")} for layer in layers]


def doc_layers(doc: str) -> list[set[str]]:
  """The map's layers, top first: the lines indented by exactly two spaces in the fenced block
  under "## Package map", names before the first run of 2+ spaces, `name/` or `name.py`."""
  section = doc.split("## Package map", 1)[1]
  block = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
  assert block, f"{DOC}: no fenced block under '## Package map'"
  layers = []
  for line in block.group(1).splitlines():
    if not re.match(r"  \S", line):
      continue
    names = re.split(r" {2,}", line.strip())[0]
    layers.append({re.sub(r"(/|\.py)$", "", n.strip()) for n in names.split("|")})
  return layers


def top_level_names() -> set[str]:
  """Every package (a folder with __init__.py) and module directly under tmax_jax/."""
  pkg = ROOT / "tmax_jax"
  packages = {p.parent.name for p in pkg.glob("*/__init__.py")}
  modules = {p.stem for p in pkg.glob("*.py") if p.stem not in ("__init__", "__main__")}
  return packages | modules


def test_doc_layers_equal_the_contract():
  doc = doc_layers(DOC.read_text())
  contract = contract_layers((ROOT / "pyproject.toml").read_text())
  assert len(contract) > 5
  assert doc == contract, (
    f"{DOC} package map and pyproject.toml '{CONTRACT}' differ:\n  doc:      {doc}\n"
    f"  contract: {contract}"
  )


def test_every_top_level_package_is_in_the_map():
  named = set().union(*doc_layers(DOC.read_text()))
  missing = top_level_names() - named
  assert not missing, f"{DOC}: the package map does not name {sorted(missing)}"


def test_a_changed_layer_is_caught():
  """The parser sees an added package and a merged layer (a check that cannot fail is none)."""
  doc = DOC.read_text()
  added = doc.replace("  recipes.py ", "  recipes.py | newpkg/ ", 1)
  assert doc_layers(added) != doc_layers(doc)
  merged = doc.replace("  jobs.py ", "  jobs.py | harbor/ ", 1)
  assert doc_layers(merged) != contract_layers((ROOT / "pyproject.toml").read_text())
