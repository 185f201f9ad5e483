"""Task images built from Dockerfiles (images/builder.py): layers, cache, errors naming the line,
sandboxes of both backends started from them, the offline stand-ins, the Apptainer definition.
Tiny Dockerfiles on the project's base rootfs, so every build step takes well under a second."""

from __future__ import annotations

import os
import pathlib
import uuid

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.sandbox import open_sandbox
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError
from tmax_jax.sandbox.images import apptainer, base_images, builder, dockerfile, mirror
from tmax_jax.sandbox.images.dockerfile import DockerfileError
from tmax_jax.sandbox.images.image import Image


def _context(
  tmp_path: pathlib.Path, dockerfile_text: str, files: dict | None = None
) -> pathlib.Path:
  ctx = tmp_path / "ctx"
  ctx.mkdir()
  (ctx / "Dockerfile").write_text(dockerfile_text)
  for rel, data in (files or {}).items():
    (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
    (ctx / rel).write_text(data)
  return ctx


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Image:
  require_base_rootfs()
  ctx = _context(
    tmp_path_factory.mktemp("img"),
    f"""
# a comment
FROM tmax-base:bookworm
ARG GREETING=hello
ENV A=b C="d e" \\
    TOKEN={uuid.uuid4().hex}
ENV PATH="/opt/extra/bin:$PATH"
RUN echo "$GREETING from the build" > /etc/tmax-greeting && rm -f /etc/motd && id -u > /etc/build-uid
WORKDIR /app
COPY data.txt ./
COPY tree /app/tree
COPY --chown=1000:1000 owned.txt /srv/
RUN echo '{{"x": 1}}' > /tmp/config.json
USER agent
RUN id -u > /tmp/user-step
USER root
EXPOSE 8080
""",  # noqa: E501 (embedded script, kept verbatim)
    {"data.txt": "payload\n", "tree/a/b.txt": "deep\n", "owned.txt": "mine\n"},
  )
  (ctx / "data.txt").chmod(0o444)  # read-only checkouts: COPY normalises to git's modes
  img = builder.build_image(ctx)
  _CONTEXTS[img.id] = ctx
  return img


_CONTEXTS: dict = {}


def test_layers_record_each_step_and_a_rebuild_is_cached(image, tmp_path):
  assert image.workdir == "/app" and dict(image.env)["C"] == "d e"
  assert dict(image.env)["PATH"] == "/opt/extra/bin:" + builder.DEFAULT_PATH
  assert [s["line"] for s in image.steps if s["line"]] == [8, 9, 10, 11, 12, 13, 15]
  again = builder.build_image(_CONTEXTS[image.id])
  assert again.id == image.id and all(s["cached"] for s in again.steps)


def test_a_changed_file_rebuilds_only_from_its_step(image, tmp_path):
  ctx = _CONTEXTS[image.id]
  copy = tmp_path / "copy"
  import shutil

  shutil.copytree(ctx, copy)
  (copy / "tree" / "a" / "b.txt").write_text("changed\n")
  other = builder.build_image(copy)
  cached = [s["cached"] for s in other.steps]
  assert cached[:4] == [True] * 4 and not any(cached[4:])  # harness, RUN, WORKDIR, COPY data


@pytest.mark.parametrize("backend", ["bubblewrap", "podman"])
def test_sandbox_from_a_built_image(image, backend, monkeypatch):
  if backend == "podman":
    from tmax_jax.sandbox.backends import podman

    if podman.podman_available():
      pytest.skip(podman.podman_available())
  planted = f"tmax-planted-{uuid.uuid4().hex}"
  monkeypatch.setenv("TMAX_PLANTED_API_KEY", planted)
  spec = EnvironmentSpec(image=str(image.path), workdir="/app", env=image.env)
  with open_sandbox(spec, backend=backend) as sb:
    out = sb.run(
      "cat /etc/tmax-greeting /etc/build-uid /app/data.txt /app/tree/a/b.txt /tmp/user-step "
      "/tmp/config.json; stat -c '%a %u' /app/data.txt /srv/owned.txt /etc/tmax-greeting; ls "
      "/etc/motd 2>&1; echo $A $C; id -u; touch /app/new && echo wrote"
    ).output
    assert out.splitlines() == [
      "hello from the build",
      "0",
      "payload",
      "deep",
      "1000",
      '{"x": 1}',
      "644 1000",
      # bwrap maps only the sandbox uid: other owners (root, host uid 1000) show as nobody
      *(("644 1000", "644 0") if backend == "podman" else ("644 65534", "644 65534")),
      "ls: cannot access '/etc/motd': No such file or directory",
      "b d e",
      "1000",
      "wrote",
    ]
    assert "Read-only" in sb.run("touch /etc/x").output
    leak = sb.run("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c TMAX_PLANTED")
    assert leak.output.strip() == "0"


def test_offline_stand_ins_serve_the_uv_installer_and_apt(image):
  spec = EnvironmentSpec(
    image=str(image.path),
    workdir="/app",
    env=(
      (
        "PATH",
        "/opt/tmax/offline/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      ),
    ),
  )
  with open_sandbox(spec, backend="bubblewrap") as sb:
    res = sb.run(
      "set -e; curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh; "
      "source $HOME/.local/bin/env; command -v uv; uv --version"
    )
    assert res.exit_code == 0 and "/home/agent/.local/bin/uv" in res.output, res.output
    assert sb.run("apt-get update && apt-get install -y curl && echo fine").output.endswith(
      "fine\n"
    )
    res = sb.run("apt-get install -y no-such-package-xyz")
    assert res.exit_code == 100 and "cannot install" in res.output
    assert "astral.sh" in sb.run("cat /tmp/.tmax-offline.log").output


@pytest.mark.parametrize(
  "text,line,match",
  [
    ("FROM tmax-base:bookworm\nRUN true\nFROM tmax-base:bookworm\n", 3, "multi-stage"),
    ("FROM tmax-base:bookworm\nCOPY --from=builder /x /y\n", 2, "--from"),
    ("FROM tmax-base:bookworm\nFROBNICATE now\n", 2, "expected a Dockerfile instruction"),
    ("FROM tmax-base:bookworm\nRUN --mount=type=cache,target=/x true\n", 2, "--mount"),
    ("FROM tmax-base:bookworm\nCOPY missing.txt /x\n", 2, "does not exist"),
    ("FROM tmax-base:bookworm\nADD https://example.com/x.tgz /x\n", 2, "offline"),
    ("RUN true\nFROM tmax-base:bookworm\n", 1, "before FROM"),
  ],
)
def test_unbuildable_dockerfiles_name_the_line(tmp_path, text, line, match):
  require_base_rootfs()
  with pytest.raises(DockerfileError, match=match) as err:
    builder.build_image(_context(tmp_path, text))
  assert err.value.line == line


def test_a_failing_run_is_a_clear_error_and_leaves_no_layer(tmp_path):
  require_base_rootfs()
  with pytest.raises(SandboxError, match="(?s)line 2 RUN failed.*no-such-cmd"):
    builder.build_image(
      _context(tmp_path, "FROM tmax-base:bookworm\nRUN echo before; no-such-cmd\n")
    )
  assert not list((builder.layers.store() / "layers").glob(f".tmp-*-{os.getpid()}"))


def test_unknown_from_falls_back_with_a_warning():
  base = base_images.resolve("registry.example.com/team/custom:1.2")
  assert base.name == "buildpack" and "no local equivalent" in base.warning
  assert base_images.resolve("python:3.12-slim").name == "python-3-13"
  assert base_images.resolve("ghcr.io/laude-institute/t-bench/python-3-13:20250620").warning == ""
  assert base_images.resolve("buildpack-deps:jammy").name == "buildpack"


def test_apptainer_definition_has_post_files_and_environment(tmp_path):
  ctx = _context(
    tmp_path,
    "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n"
    "ENV K=v\nWORKDIR /app\nCOPY f.txt ./\nRUN echo $K > /app/k\n",
    {"f.txt": "x"},
  )
  text = apptainer.apptainer_def(ctx)
  assert "Bootstrap: debootstrap\nOSVersion: trixie" in text
  files = text.split("%files\n")[1].split("\n\n")[0]
  assert f"{ctx / 'f.txt'}" in files and "/app" in files
  post = text.split("%post\n")[1].split("\n\n")[0]
  assert "python3-pip" in post and post.index("mkdir -p /app") < post.index("echo $K > /app/k")
  assert "export K=v" in text.split("%environment\n")[1]


def test_known_installer_urls_are_mapped():
  found = mirror.find_urls(
    'curl -L "https://golang.org/dl/go1.21.5.linux-$GOARCH.tar.gz" -o g.tgz'
    " && curl https://sh.rustup.rs | sh -s -- -y"
  )
  assert found == [
    ("https://golang.org/dl/go1.21.5.linux-$GOARCH.tar.gz", "go"),
    ("https://sh.rustup.rs", "rustup-offline.sh"),
  ]
  assert dockerfile.substitute("${A:-x}/${B:+y}/$C", {"C": "c", "B": "1"}) == "x/y/c"


def test_concurrent_builds_of_similar_contexts_keep_their_own_files(tmp_path):
  """Threads (the eval runner's parallel trials) building look-alike tasks at once."""
  require_base_rootfs()
  import concurrent.futures

  token = uuid.uuid4().hex
  ctxs = []
  for n in range(4):
    ctx = tmp_path / f"c{n}"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM tmax-base:bookworm\n# {token}\nCOPY seeds/ /w/\n")
    (ctx / "seeds").mkdir()
    (ctx / "seeds" / "v.txt").write_text(f"{n}\n")
    ctxs.append(ctx)
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    images = list(pool.map(builder.build_image, ctxs + ctxs))
  for n, img in enumerate(images):
    diff = builder.layers.layer_path(img.layers[-1]) / "diff" / "w" / "v.txt"
    assert diff.read_text() == f"{n % 4}\n"
  assert images[0].id == images[4].id and len({i.id for i in images}) == 4


def test_prune_keeps_layers_of_recent_images(tmp_path, monkeypatch):
  monkeypatch.setenv("TMAX_JAX_CACHE", str(tmp_path))
  root = builder.layers.store()
  for lid in ("a1", "b2", "c3"):
    (root / "layers" / lid / "diff").mkdir(parents=True)
  (root / "images").mkdir()
  (root / "images" / "new.json").write_text('{"layers": ["a1"]}')
  old = root / "images" / "old.json"
  old.write_text('{"layers": ["b2"]}')
  os.utime(old, (0, 0))
  removed = builder.prune(max_age_days=1)
  assert sorted(pathlib.Path(r).name for r in removed) == ["b2", "c3", "old.json"]
  assert (root / "layers" / "a1").is_dir() and (root / "images" / "new.json").is_file()
