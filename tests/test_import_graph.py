"""The import graph is a strict stack: the layers contract in pyproject.toml holds (import-linter),
and no module imports itself back through others, function-level imports included (so none can
exist only to break a circle)."""

import pathlib
import subprocess
import sys
import tomllib

import grimp

ROOT = pathlib.Path(__file__).parents[1]


def _cycles(graph) -> list[list[str]]:
  """Strongly connected components of more than one module (Tarjan, iterative)."""
  index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], 0
  for start in sorted(graph.modules):
    if start in index:
      continue
    work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
    index[start] = low[start] = counter
    counter += 1
    stack.append(start)
    on_stack.add(start)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = counter
          counter += 1
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        comp = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          comp.append(member)
          if member == node:
            break
        if len(comp) > 1:
          out.append(sorted(comp))
  return out


def test_the_layers_contract_holds():
  lint = pathlib.Path(sys.executable).with_name("lint-imports")
  out = subprocess.run(
    [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
  contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
  assert f"Contracts: {len(contracts['contracts'])} kept, 0 broken." in out.stdout


def test_every_top_level_module_is_in_a_layer():
  """A module outside the layers would be outside the contract: every package and module of
  tmax_jax is placed."""
  config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
  layers = config["contracts"][0]["layers"]
  placed = {m.strip() for layer in layers for m in layer.split("|")}
  graph = grimp.build_graph("tmax_jax", cache_dir=None)
  top = {m for m in graph.modules if m.count(".") == 1}
  assert top - placed == set(), top - placed


def test_no_module_imports_itself_back():
  assert _cycles(grimp.build_graph("tmax_jax", cache_dir=None)) == []


def test_the_cycle_finder_finds_a_cycle():
  class Graph:
    modules = {"a", "b", "c", "d"}
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    def find_modules_directly_imported_by(self, m):
      return self.edges[m]

  assert _cycles(Graph()) == [["a", "b", "c"]]
