"""Multi-service compose tasks: parsing (main service, volumes, depends_on, healthchecks, what
pods cannot honour) and a two-service TB1 task through the real runner on the podman backend
(a pod: the oracle needs the other service, doing nothing fails); off podman it is unsupported."""

import dataclasses
import pathlib
import textwrap

import pytest
import yaml

from tests.conftest import require_base_rootfs
from tmax_jax.sandbox.api import HealthCheck, Mount
from tmax_jax.sandbox.images.image import Image
from tmax_jax.tasks import compose, tb1
from tmax_jax.tasks.format import Task, TaskConfig, TaskFormatError, write_task
from tmax_jax.tasks.runner import RunnerConfig, TaskUnsupportedError, run_noop, run_oracle

SERVER = textwrap.dedent("""\
  import http.server, os, secrets, time
  time.sleep(1)  # not listening at once: the client waits for the healthcheck
  TOKEN = secrets.token_hex(12)  # new every start: an oracle cannot know it without asking
  class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
      body = (TOKEN if self.path == "/token" else os.environ["GREETING"]).encode()
      self.send_response(200); self.send_header("Content-Length", str(len(body)))
      self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): print("served", self.path, flush=True)
  print("server ready", flush=True)
  http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()
""")
COMPOSE = {
  "services": {
    "client": {
      "build": {"context": ".", "dockerfile": "Dockerfile"},
      "image": "${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}",
      "container_name": "${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}",
      "command": ["sh", "-c", "sleep infinity"],
      "environment": ["TEST_DIR=${T_BENCH_TEST_DIR}", "TOKEN_URL=http://server:8080/token"],
      "volumes": [
        "${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
        "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}",
      ],
      "depends_on": {"server": {"condition": "service_healthy"}},
    },
    "server": {
      "build": "./server",
      "image": "${T_BENCH_TASK_DOCKER_NAME_PREFIX}__server",
      "environment": {"GREETING": "hello"},
      "ports": ["8080:8080"],
    },
  }
}


def _tb1_pod_task(root: pathlib.Path, compose_doc: dict = COMPOSE) -> pathlib.Path:
  d = root / "token-fetch"
  (d / "tests").mkdir(parents=True)
  (d / "server").mkdir()
  (d / "task.yaml").write_text(
    yaml.safe_dump(
      {
        "instruction": "Write the token served at $TOKEN_URL to /app/token.txt.",
        "max_agent_timeout_sec": 60,
        "max_test_timeout_sec": 60,
        "parser_name": "pytest",
      }
    )
  )
  (d / "Dockerfile").write_text("FROM tmax-base:bookworm\nWORKDIR /app\n")
  (d / "server" / "server.py").write_text(SERVER)
  (d / "server" / "Dockerfile").write_text(
    "FROM tmax-base:bookworm\nCOPY server.py /srv/server.py\n"
    'HEALTHCHECK --interval=1s --timeout=3s --retries=10 CMD python3 -c "import urllib.request;'
    " urllib.request.urlopen('http://127.0.0.1:8080/')\"\n"
    'CMD ["python3", "/srv/server.py"]\n'
  )
  (d / "docker-compose.yaml").write_text(yaml.safe_dump(compose_doc))
  (d / "run-tests.sh").write_text(
    '#!/bin/bash\ncd "$TEST_DIR"\npython3 -m pytest -rA test_outputs.py\n'
  )
  (d / "tests" / "test_outputs.py").write_text(
    textwrap.dedent("""\
      import os, urllib.request
      def test_token_from_the_server():
        want = urllib.request.urlopen(os.environ["TOKEN_URL"], timeout=10).read().decode()
        assert open("/app/token.txt").read().strip() == want
  """)
  )
  (d / "solution.sh").write_text(
    '#!/bin/bash\npython3 -c "import os, urllib.request; '
    "print(urllib.request.urlopen(os.environ['TOKEN_URL']).read()"
    '.decode())" > /app/token.txt\n'
  )
  return d


# ---------------------------------------------------------------------------------- parsing
def _load(tmp_path, doc) -> compose.Compose:
  env = tmp_path / "task" / "environment"
  env.mkdir(parents=True, exist_ok=True)
  (env / "docker-compose.yaml").write_text(yaml.safe_dump(doc))
  return compose.load_compose(env / "docker-compose.yaml")


def test_the_main_service_is_the_harness_client_else_client_or_main_else_the_own_build(tmp_path):
  assert _load(tmp_path, COMPOSE).main == "client"
  harness = "${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}"
  named = {"services": {"app": {"build": ".", "container_name": harness}, "client": {"image": "x"}}}
  assert _load(tmp_path, named).main == "app"
  harbor = {"services": {"db": {"image": "x"}, "main": {"build": "sub"}}}
  assert _load(tmp_path, harbor).main == "main"
  assert _load(tmp_path, {"services": {"db": {"build": "db"}, "app": {"build": "."}}}).main == "app"
  with pytest.raises(TaskFormatError, match="cannot tell which service.*a, b"):
    _load(tmp_path, {"services": {"a": {"build": "a"}, "b": {"build": "b"}}})
  with pytest.raises(TaskFormatError, match="services"):
    _load(tmp_path, {"services": []})


def test_volumes_depends_on_healthchecks_and_what_is_not_honoured(tmp_path):
  (tmp_path / "task" / "environment" / "conf").mkdir(parents=True)
  comp = _load(
    tmp_path,
    {
      "services": {
        "client": {"build": ".", "depends_on": ["db"]},
        "db": {
          "image": "python:3.11-slim",
          "command": "python3 -m http.server 5432",
          "volumes": [
            "${T_BENCH_TASK_LOGS_PATH}:/var/log/tb",
            "data:/data:ro",
            "/scratch",
            "./conf:/etc/db",
            {"type": "volume", "source": "data", "target": "/d2"},
          ],
          "depends_on": {"client": {"condition": "service_started"}},
          "healthcheck": {
            "test": ["CMD-SHELL", "pg_isready"],
            "interval": "1m30s",
            "timeout": "500ms",
            "retries": 2,
          },
          "ports": ["5432:5432"],
          "privileged": True,
          "x-note": 1,
          "frobnicate": 2,
        },
      }
    },
  )
  db = comp.service("db")
  conf = str((tmp_path / "task" / "environment" / "conf").resolve())
  assert db.mounts == (
    Mount("logs", "/var/log/tb"),
    Mount("volume:data", "/data", True),
    Mount("volume:anon-db-2", "/scratch"),
    Mount(conf, "/etc/db"),
    Mount("volume:data", "/d2"),
  )
  assert comp.service("client").depends_on == (("db", "service_started"),)
  assert db.healthcheck == HealthCheck(("/bin/sh", "-c", "pg_isready"), 90.0, 0.5, 2, 0.0)
  assert db.command == ("python3", "-m", "http.server", "5432")
  assert db.unsupported == ("service db runs privileged",)
  assert any("ports ignored (no effect" in n for n in db.notes)
  assert any("frobnicate ignored (unknown key)" in n for n in db.notes)
  assert not any("x-note" in n for n in db.notes)
  bad = {
    "services": {
      "client": {"build": "."},
      "db": {"image": "x", "volumes": ["/etc:/host"], "build": {"context": "db", "args": {"A": 1}}},
    }
  }
  assert _load(tmp_path, bad).service("db").unsupported == (
    "build.args is not supported by the image builder",
    "service db mounts host path '/etc', which is not in the task's environment/",
  )
  with pytest.raises(TaskFormatError, match=r"services\.db\.healthcheck\.interval.*duration"):
    _load(
      tmp_path,
      {
        "services": {
          "client": {"build": "."},
          "db": {"image": "x", "healthcheck": {"test": "true", "interval": "soon"}},
        }
      },
    )


def test_service_command_follows_dockerfile_and_compose_rules():
  def image(**runtime):
    return Image(
      "id", "/base", (), (), "/", "root", "tmax-base:bookworm", runtime=tuple(runtime.items())
    )

  svc = compose.Service("s", context=".")
  assert compose.service_command(svc, image(CMD='["redis", "--port", "1"]')) == (
    "redis",
    "--port",
    "1",
  )
  assert compose.service_command(svc, image(CMD="redis --port 1")) == (
    "/bin/sh",
    "-c",
    "redis --port 1",
  )
  assert compose.service_command(svc, image(ENTRYPOINT='["tini", "--"]', CMD='["run"]')) == (
    "tini",
    "--",
    "run",
  )
  assert compose.service_command(svc, image(ENTRYPOINT="run.sh", CMD='["ignored"]')) == (
    "/bin/sh",
    "-c",
    "run.sh",
  )
  override = dataclasses.replace(svc, entrypoint=("py",), command=("-m", "x"))
  assert compose.service_command(override, image(ENTRYPOINT='["e"]', CMD='["c"]')) == (
    "py",
    "-m",
    "x",
  )
  with pytest.raises(compose.UnsupportedCompose, match="nothing to run"):
    compose.service_command(svc, image())
  check = compose.image_healthcheck(
    image(HEALTHCHECK="--interval=2s --retries=4 CMD curl -f x"), "Dockerfile"
  )
  assert check == HealthCheck(("/bin/sh", "-c", "curl -f x"), 2.0, 30.0, 4, 0.0)
  assert compose.image_healthcheck(image(HEALTHCHECK="NONE"), "Dockerfile") is None


def test_a_registry_only_image_without_a_command_is_unsupported_not_zero(tmp_path):
  d = _tb1_pod_task(
    tmp_path, {"services": {"client": {"build": "."}, "db": {"image": "postgres:16"}}}
  )
  task = write_task(tb1.convert_tb1(d), tmp_path / "converted")
  comp = compose.load_compose(compose.compose_file(task))
  with pytest.raises(compose.UnsupportedCompose, match="postgres:16 has no local equivalent"):
    compose.pod_spec(task, comp, lambda *a: None)


def test_only_the_environment_compose_file_counts_and_a_broken_one_fails_the_build(tmp_path):
  """A docker-compose.yml the agent is asked to fix is task data (a TB2 sample task has one);
  environment/docker-compose.yaml that does not parse is a broken environment (reward 0)."""
  data = {
    "Dockerfile": b"FROM tmax-base:bookworm\n",
    "docker-compose.yml": b"services: {a: {image: x}, b: {image: '${B'}}\n",
  }
  task = write_task(
    Task("fix it", TaskConfig(), environment=data, tests={"test.sh": b"#!/bin/bash\n"}),
    tmp_path / "data-file",
  )
  assert compose.service_names(task) == [] and compose.compose_file(task) is None
  broken = write_task(
    dataclasses.replace(
      task, path=None, environment={**data, "docker-compose.yaml": b"services: [a\n"}
    ),
    tmp_path / "broken",
  )
  res = run_noop(broken)
  assert (
    res.reward == 0.0
    and res.reason.startswith("build_failed")
    and ("docker-compose.yaml" in res.reason)
  ), res


# ----------------------------------------------------------------------------- real pods
@pytest.fixture(scope="module")
def pod_task(tmp_path_factory):
  require_base_rootfs()
  tmp = tmp_path_factory.mktemp("pod-task")
  task = tb1.convert_tb1(_tb1_pod_task(tmp))
  assert task.config.metadata["compose_services"] == ["client", "server"]
  assert dict(task.config.environment.env) == {
    "TEST_DIR": "/tests",
    "TOKEN_URL": "http://server:8080/token",
  }
  return write_task(task, tmp / "converted")


def test_off_podman_a_multi_service_task_is_unsupported_with_the_reason(pod_task):
  with pytest.raises(
    TaskUnsupportedError,
    match=r"2 services \(client, server\): the bubblewrap "
    "backend runs one container per trial",
  ):
    run_oracle(pod_task, RunnerConfig(backend="bubblewrap"))


@pytest.mark.slow  # 17 s; pods: tests/sandbox/test_pod.py
def test_two_service_task_runs_as_a_pod_oracle_passes_noop_fails(pod_task, tmp_path):
  from tmax_jax.sandbox.backends import podman

  reason = podman.podman_available()
  if reason:
    pytest.skip(f"podman cannot run here: {reason}")
  cfg = RunnerConfig(backend="podman", memory_mb=1024)
  res = run_oracle(pod_task, cfg)
  assert res.reward == 1.0, res
  env_notes = res.logs["environment.txt"]
  assert "compose: 2 services as one podman pod; the agent runs in client" in env_notes
  assert "service server: ports ignored" in env_notes and "FROM tmax-base:bookworm" in env_notes
  assert "server ready" in res.logs["service-server.txt"]
  assert "served /token" in res.logs["service-server.txt"]  # the oracle and the tests asked it
  noop = run_noop(pod_task, cfg)
  assert noop.reward == 0.0 and "FAILED" in noop.logs["test-stdout.txt"], noop
  doc = yaml.safe_load((pod_task.path / "environment" / "docker-compose.yaml").read_text())
  doc["services"]["server"]["cap_add"] = ["NET_ADMIN"]
  other = write_task(tb1.convert_tb1(_tb1_pod_task(tmp_path, doc)), tmp_path / "caps")
  with pytest.raises(TaskUnsupportedError, match="service server adds capabilities"):
    run_noop(other, cfg)
