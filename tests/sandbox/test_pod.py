"""Podman pods (backends/pod.py): the agent's container and side services on one loopback network,
depends_on conditions, the isolation and cleanup rules of single sandboxes. Tiny service images
on the project's base rootfs (one cached COPY layer each)."""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.sandbox import open_pod, runtime
from tmax_jax.sandbox.api import (
  EnvironmentSpec,
  HealthCheck,
  Limits,
  Mount,
  PodSpec,
  SandboxError,
  ServiceSpec,
)
from tmax_jax.sandbox.backends import podman
from tmax_jax.sandbox.backends.pod import start_order, validate_pod
from tmax_jax.sandbox.images import builder
from tmax_jax.sandbox.images.image import Image

pytestmark = pytest.mark.timeout(300)

WEB = textwrap.dedent("""\
  import http.server, os, secrets, time
  time.sleep(float(os.environ.get("BOOT_S", "0")))  # not listening yet: the healthcheck waits
  token = secrets.token_hex(8)
  seed = open("/data/seed.txt").read().strip() if os.path.exists("/data/seed.txt") else "-"
  class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
      body = f"{token} {seed} {os.environ.get('GREETING', '-')}\\n".encode()
      self.send_response(200); self.send_header("Content-Length", str(len(body)))
      self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): print("served", self.path, flush=True)
  print("web up", os.getuid(), flush=True)
  http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()
""")
GET = (
  'python3 -c "import sys, urllib.request; '
  'print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())"'
)
PROBE = ("python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/')")


def _image(tmp_path: pathlib.Path, name: str, dockerfile: str, files: dict | None = None) -> str:
  ctx = tmp_path / name
  ctx.mkdir()
  (ctx / "Dockerfile").write_text(dockerfile)
  for rel, text in (files or {}).items():
    (ctx / rel).write_text(text)
  return str(builder.build_image(ctx).path)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
  require_base_rootfs()
  reason = podman.podman_available()
  if reason:
    pytest.skip(f"podman cannot run here: {reason}")
  tmp = tmp_path_factory.mktemp("pod-images")
  web = _image(
    tmp,
    "web",
    "FROM tmax-base:bookworm\nCOPY web.py /srv/web.py\nENV GREETING=hi\n"
    'CMD ["python3", "/srv/web.py"]\n',
    {"web.py": WEB},
  )
  main = _image(tmp, "main", "FROM tmax-base:bookworm\nWORKDIR /app\n")
  return {"web": web, "main": main}


def _web(images, **kw) -> ServiceSpec:
  image = Image.load(images["web"])
  fields = dict(
    name="web",
    image=images["web"],
    command=("python3", "/srv/web.py"),
    env=image.env,
    healthcheck=HealthCheck(PROBE, interval_s=0.5, timeout_s=5, retries=20),
  )
  fields.update(kw)
  return ServiceSpec(**fields)


def _leftovers() -> list[str]:
  """This process's pods and containers that podman still knows about."""
  tag = runtime.owner_tag()
  out = []
  for args in (
    ["pod", "ps", "--format", "{{.Name}} {{.Labels.tmax_owner}}"],
    ["ps", "-a", "--format", "{{.Names}} {{.Labels.tmax_owner}}"],
  ):
    res = podman.run_podman(args, check=False)
    out += [ln for ln in res.stdout.decode().splitlines() if ln.endswith(" " + tag)]
  return out


class _Host(socketserver.BaseRequestHandler):
  def handle(self):
    self.request.sendall(b"host-server\n")


def test_services_share_the_network_not_the_processes_and_leave_nothing(
  images, snapshot, monkeypatch
):
  """A one-shot service seeds a named volume (service_completed_successfully), the web service
  reads it and becomes healthy after a delay (service_healthy), the agent reaches it by name and
  on localhost; no host variable reaches any container, no service process is visible, the pod
  network is loopback only; reset keeps the services; close leaves no pod, container or dir."""
  planted = f"tmax-planted-{uuid.uuid4().hex}"
  monkeypatch.setenv("TMAX_PLANTED_API_KEY", planted)
  before = snapshot()
  init = ServiceSpec(
    "init",
    images["main"],
    ("/bin/sh", "-c", "echo seeded > /data/seed.txt"),
    mounts=(Mount("volume:data", "/data"),),
  )
  web = _web(
    images,
    env=(*Image.load(images["web"]).env, ("BOOT_S", "1.5")),
    mounts=(Mount("volume:data", "/data", read_only=True),),
    depends_on=(("init", "service_completed_successfully"),),
    aliases=("api",),
  )
  spec = PodSpec(
    EnvironmentSpec(image=images["main"], workdir="/app", limits=Limits(memory_mb=768)),
    "client",
    (web, init),
    main_depends_on=(("web", "service_healthy"),),
    main_mounts=(Mount("volume:data", "/data"),),
  )
  assert start_order(spec) == ["init", "web", "client"]
  server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Host)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  sb = open_pod(spec)
  try:
    token, seed, greeting = sb.run(f"{GET} http://web:8080/").output.split()
    assert (seed, greeting) == ("seeded", "hi") and len(token) == 16
    assert sb.run(f"{GET} http://api:8080/; {GET} http://localhost:8080/").output.split()[::3] == [
      token,
      token,
    ]
    assert sb.run("cat /data/seed.txt; id -u; hostname").output == "seeded\n1000\nsandbox\n"
    assert "web.py" not in sb.run("ps -eo args").output  # pid namespaces are per container
    env_check = "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c TMAX_PLANTED"
    assert sb.run(env_check).output.strip() == "0"
    web_env = podman.run_podman(
      ["exec", f"tmax-{sb.name}-web", "sh", "-c", env_check], check=False
    ).stdout.decode()
    assert web_env.strip() == "0", web_env
    devices = sb.run("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '").output
    assert devices.split() == ["lo"]
    res = sb.run(
      f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
      f"{server.server_address[1]}), timeout=3); print('CONNECTED')\"",
      timeout_s=30,
    )
    assert "CONNECTED" not in res.output
    inspect = podman.run_podman(
      [
        "inspect",
        "--format",
        "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}}",
        f"tmax-{sb.name}-web",
      ]
    ).stdout.decode()
    assert inspect.split() == [str(768 << 20), "512"]
    sb.run("sleep 300 &")
    sb.reset()  # the main container restarts, the services keep their state
    assert sb.run(f"{GET} http://web:8080/; pgrep -c sleep || true").output.split()[::3] == [
      token,
      "0",
    ]
    assert "web up 0" in sb.service_logs()["web"] and "served /" in sb.service_logs()["web"]
  finally:
    sb.close()
    server.shutdown()
    server.server_close()
  assert _leftovers() == [] and snapshot() == before


def test_a_service_that_never_gets_healthy_fails_the_start_naming_it(images, snapshot):
  before = snapshot()
  web = _web(
    images,
    env=(("BOOT_S", "600"),),
    healthcheck=HealthCheck(PROBE, interval_s=0.2, timeout_s=0.5, retries=3),
  )
  spec = PodSpec(
    EnvironmentSpec(image=images["main"]),
    "client",
    (web,),
    main_depends_on=(("web", "service_healthy"),),
  )
  with pytest.raises(SandboxError, match=r"pod service web \(awaited by client\) was not healthy"):
    open_pod(spec)
  crash = ServiceSpec("job", images["main"], ("/bin/sh", "-c", "echo broken config; exit 3"))
  with pytest.raises(SandboxError, match=r"job.*did not complete successfully \(exit 3\).*broken"):
    open_pod(
      PodSpec(
        EnvironmentSpec(image=images["main"]),
        "client",
        (crash,),
        main_depends_on=(("job", "service_completed_successfully"),),
      )
    )
  assert _leftovers() == [] and snapshot() == before


def test_the_pod_of_a_killed_owner_stops_and_is_swept(images, tmp_path):
  script = textwrap.dedent(f"""\
    import sys, time
    from tmax_jax.sandbox import open_pod
    from tmax_jax.sandbox.api import EnvironmentSpec, PodSpec, ServiceSpec
    svc = ServiceSpec("idle", {images["main"]!r}, ("sleep", "1000"))
    sb = open_pod(PodSpec(EnvironmentSpec(image={images["main"]!r}), "client", (svc,)))
    print(sb.pod, flush=True)
    time.sleep(1000)
  """)
  child = subprocess.Popen(
    [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
  )
  try:
    pod = child.stdout.readline().decode().strip()
    assert pod.startswith("tmax-pod-p"), pod
  finally:
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
  service = f"tmax-{pod.removeprefix('tmax-pod-')}-idle"
  deadline = time.monotonic() + 20
  while podman.run_podman(["container", "exists", service], check=False).returncode == 0:
    assert time.monotonic() < deadline, "the service outlived its owner"
    time.sleep(0.2)
  from tmax_jax.sandbox.pool import SandboxPool

  removed = SandboxPool.sweep()
  assert pod in removed
  res = podman.run_podman(["pod", "exists", pod], check=False)
  assert res.returncode != 0


def test_pod_spec_errors_name_the_field(tmp_path):
  record = tmp_path / "image.json"
  record.write_text("{}")
  main = EnvironmentSpec(image="/nonexistent")
  ok = ServiceSpec("db", str(record), ("db",))
  cases = [
    (PodSpec(main, "db", (ok,)), "names must be unique"),
    (
      PodSpec(main, services=(ServiceSpec("db", "busybox", ("x",)),)),
      r"services\[0\] \(db\)\.image",
    ),
    (PodSpec(main, services=(ServiceSpec("db", str(record), ()),)), "command"),
    (
      PodSpec(main, services=(ok,), main_depends_on=(("cache", "service_started"),)),
      "depends on 'cache'",
    ),
    (
      PodSpec(main, services=(ok,), main_depends_on=(("db", "service_healthy"),)),
      "db has no healthcheck",
    ),
    (PodSpec(main, services=(ok,), main_depends_on=(("db", "up"),)), "condition 'up'"),
    (
      PodSpec(
        main,
        services=tuple(
          ServiceSpec(a, str(record), ("x",), depends_on=((b, "service_started"),))
          for a, b in (("a", "b"), ("b", "a"))
        ),
      ),
      "cycle a -> b -> a",
    ),
  ]
  for spec, match in cases:
    with pytest.raises(SandboxError, match=match):
      validate_pod(spec)


def test_service_command_line_has_the_limits_and_no_host_environment():
  """The exact `podman run` of a side service (a pod is not started: a fake instance)."""
  from tmax_jax.sandbox.backends.pod import SERVICE_CAPS, PodmanPod

  pod = PodmanPod.__new__(PodmanPod)
  pod.name, pod.root, pod.hosts_file = "p1-2-0", pathlib.Path("/x"), pathlib.Path("/x/hosts")
  pod.spec = EnvironmentSpec(image="/x", limits=Limits(memory_mb=512, max_processes=64, cpus=0.5))
  pod.binds = {"/logs": pathlib.Path("/x/logs")}
  pod._born = time.monotonic()  # the lifetime counts from here
  svc = ServiceSpec(
    "db",
    "/x.json",
    ("postgres", "-D", "/d"),
    env=(("PGDATA", "/d"),),
    user="postgres",
    mounts=(Mount("logs", "/var/log/tb"),),
  )
  args = pod._service_args(svc)
  line = " ".join(args)
  for part in (
    "--pod tmax-pod-p1-2-0",
    "--memory 512m",
    "--pids-limit 64",
    "--cpus 0.5",
    f"--timeout {Limits().lifetime_s}",  # the hard lifetime, enforced by conmon
    "--cap-drop ALL",
    "--security-opt no-new-privileges",
    "--user postgres",
    "-v /x/hosts:/etc/hosts:ro",
    "-v /x/logs:/var/log/tb:rw",
    "--env PGDATA=/d",
    "--rootfs /x/services/db/rootfs",
  ):
    assert part in line, part
  caps = [a for a, b in itertools.pairwise(args) if b in SERVICE_CAPS]
  assert caps == ["--cap-add"] * len(SERVICE_CAPS)
  assert args[-3:] == ["postgres", "-D", "/d"] and "--env-host" not in args


HARDENED = {"--cap-drop", "--security-opt", "--log-driver", "--memory", "--memory-swap"}
HARDENED |= {"--pids-limit", "--ulimit", "--timeout", "--cpus"}


def _hardened(args: list[str]) -> list[tuple[str, ...]]:
  """The security and limit flags of a `podman run` argv with their values, in order."""
  alone = [(a,) for a in args if a in ("--rm", "--init")]
  return alone + [(a, b) for a, b in itertools.pairwise(args) if a in HARDENED]


def test_sandbox_and_pod_service_share_the_hardened_podman_flags():
  """Both container kinds build their argv from podman.hardened_run_args: the same security
  flags and limits in the same order (a pod's services add only their capabilities)."""
  from tmax_jax.sandbox.backends.pod import PodmanPod

  lim = Limits(memory_mb=512, max_processes=64, cpus=0.5)
  sb = podman.PodmanSandbox.__new__(podman.PodmanSandbox)
  sb.name, sb.image, sb.image_root = "p1-2-1", "img", None
  sb.spec, sb.binds, sb._born = EnvironmentSpec(image="img", limits=lim), {}, time.monotonic()
  pod = PodmanPod.__new__(PodmanPod)
  pod.name, pod.root, pod.hosts_file = "p1-2-0", pathlib.Path("/x"), pathlib.Path("/x/hosts")
  pod.spec, pod.binds, pod._born = EnvironmentSpec(image="/x", limits=lim), {}, sb._born
  svc = ServiceSpec("db", "/x.json", ("postgres",), user="postgres")
  sandbox_args, service_args = sb.run_args(), pod._service_args(svc)
  assert _hardened(sandbox_args) == _hardened(service_args)
  assert ("--cap-drop", "ALL") in _hardened(sandbox_args)
  assert ("--security-opt", "no-new-privileges") in _hardened(sandbox_args)
  assert "--cap-add" not in sandbox_args and "--cap-add" in service_args
