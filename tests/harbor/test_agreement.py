"""Agreement (slow): Harbor's oracle and nop agents against our eval runner's oracle and no-op,
per task, through (a) Harbor's own podman environment (our task images, pulled into podman) and
(b) our plugin environment (our bubblewrap sandbox behind Harbor's API), on our procedural tasks
and the TB2 development sample (no solutions there: nop only). A task that cannot build is
reported with the same reason on every path.

Harbor's podman runs the TB2 sample's first TB2_PODMAN tasks (sorted; the one that does not
build is among them): each podman trial costs ~20 s of compose start/stop on a 2-core CI box;
`python3 bench/harbor_overhead.py --agreement` runs the whole sample on every path."""

import pathlib
import shutil

import pytest

from tests.conftest import require_base_rootfs
from tests.harbor.harbor_helpers import TB2, require_harbor, require_podman, write_tasks
from tmax_jax.harbor import agreement

pytestmark = pytest.mark.slow
TB2_PODMAN = ("acl2_induction_scheme_selection_hard", "docker_container_forensics_medium")


@pytest.fixture(scope="module")
def ours_dir(tmp_path_factory):
  require_harbor()
  require_base_rootfs()
  return write_tasks(tmp_path_factory.mktemp("ours"), levels=(0, 1, 2))


def _assert_agree(table: dict) -> None:
  for task, row in table.items():
    assert len(set(row.values())) == 1, f"{task}: {row}"


def test_our_tasks_agree_on_both_environments(ours_dir, tmp_path):
  require_podman()
  table = agreement.compare(
    ours_dir, tmp_path, agents=("oracle", "nop"), environments=("plugin", "podman")
  )
  _assert_agree(table)
  assert {row["ours"] for task, row in table.items() if task[1] == "oracle"} == {"1.0"}
  assert {row["ours"] for task, row in table.items() if task[1] == "nop"} == {"0.0"}


def test_tb2_sample_agrees(tmp_path):
  require_harbor()
  require_base_rootfs()
  if not TB2.is_dir():
    pytest.skip(f"the TB2 development sample is not at {TB2}")
  table = agreement.compare(TB2, tmp_path / "all", agents=("nop",), environments=("plugin",))
  _assert_agree(table)
  assert len(table) == len([d for d in TB2.iterdir() if (d / "task.toml").is_file()])
  broken = {t: r["ours"] for t, r in table.items() if r["ours"] != "0.0"}
  assert list(broken) == [("docker_container_forensics_medium", "nop")]
  assert broken[("docker_container_forensics_medium", "nop")].startswith("build_failed: ")
  require_podman()
  subset = tmp_path / "subset"
  for name in TB2_PODMAN:
    shutil.copytree(TB2 / name, subset / name)
  table = agreement.compare(subset, tmp_path / "podman", agents=("nop",), environments=("podman",))
  _assert_agree(table)
  assert len(table) == len(TB2_PODMAN) and pathlib.Path(subset).is_dir()
