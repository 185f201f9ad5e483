"""Tasks as Harbor 0.26 reads them, and task images Harbor's podman environment can start.

Harbor validates task.toml strictly: [task] name must be "org/name" and authors are {name, email}
tables; our writer (tasks/format.py) keeps plain author strings and bare names, which our own
reader and TB2 accept. `harbor_view` writes a copy of a task that Harbor accepts. With `image`
set (`podman_image`: the task's own image from our builder, flattened once into the podman
storage the project uses), the copy names it as [environment] docker_image, so Harbor's podman or
docker environment starts exactly our image instead of building the Dockerfile against a registry
(none is reachable here). Harbor's podman cannot run a task without network on this host (its
egress-control sidecar is an Alpine image from a registry), so such a copy also gets
allow_internet = true; the copy's notes say so.

  python3 -m tmax_jax.harbor.tasks TASKS --out DIR [--podman]
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import tomllib

from tmax_jax import cli, json_io
from tmax_jax.harbor import oci
from tmax_jax.sandbox import SandboxError
from tmax_jax.sandbox.images import podman_store
from tmax_jax.sandbox.images.dockerfile import DockerfileError
from tmax_jax.tasks import environment as envlib
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import loader

ORG = "tmax"  # the org of task names that have none (Harbor wants "org/name")
IMAGE_REPO = "localhost/tmax-task"
INIT_COMPOSE = "services:\n  main:\n    init: true\n"


def harbor_name(name: str) -> str:
  """An "org/name" package name Harbor accepts for task `name`."""
  org, _, short = name.rpartition("/")
  short = re.sub(r"[^A-Za-z0-9._-]+", "-", short).strip(".-") or "task"
  return f"{re.sub(r'[^A-Za-z0-9._-]+', '-', org).strip('.-') or ORG}/{short}"


def harbor_ready(task: fmt.Task) -> bool:
  """Whether Harbor takes the task's task.toml as it is on disk (no [task] table, or an org/name
  with author tables): TB2 tasks are; tasks our writer made are not."""
  info = tomllib.loads((task.path / "task.toml").read_text()).get("task")
  if info is None:
    return True
  authors = info.get("authors") or []
  return "/" in str(info.get("name", "")) and all(isinstance(a, dict) for a in authors)


@dataclasses.dataclass(frozen=True)
class View:
  """A Harbor-readable task copy: its dir, the image it names (or None) and what changed."""

  path: pathlib.Path
  image: str | None
  notes: tuple[str, ...]


def harbor_view(
  task: fmt.Task, out: pathlib.Path, image: str | None = None, *, public_network: bool = False
) -> View:
  """Writes `task` to `out` with a task.toml Harbor accepts (module docstring); `image`: the
  prebuilt image to name; public_network: allow_internet = true (Harbor's podman needs it)."""
  fmt.write_task(task, out, overwrite=True)
  doc = fmt.config_to_dict(task.config)
  info = doc.setdefault("task", {})
  notes = []
  name = harbor_name(task.config.task.name or task.name or out.name)
  if info.get("name") != name:
    notes.append(f"[task] name {info.get('name', '')!r} -> {name!r} (Harbor wants org/name)")
  info["name"] = name
  if info.get("authors"):
    info["authors"] = [{"name": a} for a in info["authors"]]
  env = doc.setdefault("environment", {})
  if image is not None:
    env["docker_image"] = image
    notes.append(f"[environment] docker_image = {image!r} (built by tmax_jax, not by Harbor)")
    if not (out / "environment" / "docker-compose.yaml").exists():
      # PID 1 of Harbor's container is `sh -c "sleep infinity"`, which ignores SIGTERM: every
      # stop would wait out compose's 10 s grace. An init (catatonit) ends it at once.
      json_io.write_text_atomic(out / "environment" / "docker-compose.yaml", [INIT_COMPOSE])
      notes.append("environment/docker-compose.yaml: main gets an init process (fast stop)")
  if public_network and not env.get("allow_internet", True):
    env["allow_internet"] = True
    notes.append("[environment] allow_internet false -> true (Harbor's podman needs a network)")
  json_io.write_text_atomic(out / "task.toml", [fmt.dumps_toml(doc)])
  return View(out, image, tuple(notes))


def podman_image(task: fmt.Task) -> str:
  """The task's image (built by our builder, cached by layers) as a podman image in the project's
  storage, imported once per image id (flattened: tar of the mounted layers | podman import)."""
  built = envlib.built_spec(task)
  if built.image is None:  # no Dockerfile: the base rootfs (+ seeds, which need a build here)
    raise SandboxError(f"{task.path}: no environment/Dockerfile; Harbor needs an image to start")
  name = f"{IMAGE_REPO}:{built.image.id}"
  if not podman_store.image_exists(name):
    oci.import_image(built.image, name, dict(built.spec.env), built.spec.workdir)
  return name


def prepare(
  source: pathlib.Path, out: pathlib.Path, *, podman_images: bool = False
) -> dict[str, View | str]:
  """Harbor views of every task under `source` (TB2, or TB1 converted) in out/<dir name>: task
  dir name -> View, or the reason it has none (an image that does not build)."""
  tasks = loader.load_tasks(source, converted_dir=out / ".converted")
  views: dict[str, View | str] = {}
  for task in cli.progress(tasks, desc="harbor task views"):
    key = task.path.name
    try:
      image = podman_image(task) if podman_images else None
    except (SandboxError, DockerfileError, fmt.TaskFormatError) as err:
      views[key] = f"build_failed: {err}"
      continue
    views[key] = harbor_view(task, out / key, image, public_network=podman_images)
  return views


def runnable(
  source: pathlib.Path, out: pathlib.Path, *, podman_images: bool = False
) -> tuple[pathlib.Path, dict[str, str]]:
  """A task dir Harbor can run for `source`: source itself when Harbor takes every task as it is
  (and no podman images are needed), else views under `out`; -> (dir, {task dir name: why it has
  no view}) (a task whose image does not build)."""
  if not podman_images and all(harbor_ready(t) for t in loader.load_tasks(source)):
    return source, {}
  views = prepare(source, out, podman_images=podman_images)
  return out, {k: v for k, v in views.items() if isinstance(v, str)}


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("source", type=pathlib.Path, help="a task dir or a tree of task dirs")
  p.add_argument("--out", type=pathlib.Path, required=True, help="where the Harbor views go")
  p.add_argument("--podman", action="store_true", help="import each task's image for podman")
  args = p.parse_args(argv)
  for key, view in prepare(args.source, args.out, podman_images=args.podman).items():
    print(f"{key}: {view if isinstance(view, str) else view.path}")
    for note in [] if isinstance(view, str) else view.notes:
      print(f"  {note}")
  return 0


if __name__ == "__main__":
  cli.run(main)
