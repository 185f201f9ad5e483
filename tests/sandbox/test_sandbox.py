"""Acceptance tests on real sandboxes (bubblewrap and podman): shell, files, isolation, limits,
bad input. Every sandbox here runs the real base rootfs."""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import socketserver
import threading
import time
import uuid

import pytest

from tmax_jax.sandbox import open_sandbox
from tmax_jax.sandbox.api import EnvironmentSpec, Limits, SandboxError

pytestmark = pytest.mark.timeout(300)


def test_persistent_shell_keeps_cwd_env_functions(sb):
  assert sb.run("cd /tmp && export X=1; Y=two; f() { echo fn-$1; }").status == "ok"
  res = sb.run("pwd; echo $X $Y; f ok")
  assert res.output == "/tmp\n1 two\nfn-ok\n" and res.exit_code == 0 and res.status == "ok"
  assert sb.run("exit 7").exit_code == 7  # `exit` ends the command, not the session
  assert sb.run("pwd; echo $X").output == "/tmp\n1\n"
  assert sb.run("false").exit_code == 1


def test_timeout_kills_the_whole_tree_and_the_shell_stays_usable(sb):
  sb.run("export KEEP=yes; cd /tmp")
  start = time.monotonic()
  res = sb.run("bash -c 'sleep 1001 & sleep 1002 & wait' & sleep 1003; echo never", timeout_s=2)
  assert res.status == "timeout" and res.exit_code is None and "timed out" in res.output
  assert time.monotonic() - start < 15
  time.sleep(0.3)
  left = sb.run("ps -eo args | grep -c '^sleep 100[123]' || true")
  assert left.output.strip() == "0", left.output
  assert sb.run("echo $KEEP; pwd").output == "yes\n/tmp\n"


def test_background_process_survives_and_does_not_block(sb):
  start = time.monotonic()
  res = sb.run("sleep 60 >/dev/null 2>&1 & echo started")
  assert res.output == "started\n" and time.monotonic() - start < 10
  # the sandbox user's: bubblewrap's lifetime watchdog sleeps in the sandbox as another user. The
  # background child may not have exec'd sleep yet when the command returns (a loaded machine
  # runs the shell first): the count is polled, the wait bounded.
  deadline, count = time.monotonic() + 20, ""
  while count != "1" and time.monotonic() < deadline:
    count = sb.run("pgrep -c -x -u agent sleep").output.strip()
  assert count == "1"


def test_exec_runs_a_fresh_process(sb):
  sb.run("export ONLY_SHELL=1; cd /tmp; echo data > /workspace/f.txt")
  res = sb.exec(["bash", "-c", "pwd; echo ${ONLY_SHELL:-unset}; cat f.txt"])
  assert res.output == "/workspace\nunset\ndata\n" and res.exit_code == 0
  assert sb.exec(["sh", "-c", "exit 4"]).exit_code == 4
  slow = sb.exec(["sleep", "100"], timeout_s=2)
  assert slow.status == "timeout" and slow.exit_code is None


def test_upload_download_files_and_dirs(sb, tmp_path):
  src = tmp_path / "src"
  (src / "sub").mkdir(parents=True)
  (src / "a.txt").write_text("alpha")
  (src / "sub" / "b.bin").write_bytes(bytes(range(256)))
  sb.upload(src, "/workspace/proj")
  sb.upload(src / "a.txt", "/tests/a.txt")
  assert (
    sb.run("cat /workspace/proj/a.txt /tests/a.txt; wc -c < proj/sub/b.bin").output
    == "alphaalpha256\n"
  )
  sb.run(
    "mkdir -p out/deep && echo result > out/deep/r.txt && echo log > /logs/verifier/reward.txt"
  )
  sb.download("/workspace/out", tmp_path / "out")
  sb.download("/logs/verifier/reward.txt", tmp_path / "reward.txt")
  assert (tmp_path / "out" / "deep" / "r.txt").read_text() == "result\n"
  assert (tmp_path / "reward.txt").read_text() == "log\n"
  assert sb.run("ls /logs").output.split() == ["agent", "artifacts", "verifier"]
  with pytest.raises(SandboxError, match="does not exist"):
    sb.download("/workspace/missing.txt", tmp_path / "m")
  with pytest.raises(SandboxError):
    sb.upload(src / "a.txt", "/usr/lib/a.txt")  # read-only image


def test_download_does_not_follow_symlinks_to_the_host(sb, tmp_path):
  secret = pathlib.Path("/tmp") / f"tmax_secret_{uuid.uuid4().hex}"
  secret.write_text("host secret")
  try:
    sb.run(f"ln -s {secret} /workspace/leak; ln -s /etc /workspace/etc_link")
    for name in ("leak", "etc_link/../" + secret.name):
      dest = tmp_path / f"out_{abs(hash(name))}"
      with contextlib.suppress(Exception):  # refusing (any error) is fine, leaking is not
        sb.download(f"/workspace/{name}", dest)
      if dest.is_file() and not dest.is_symlink():
        assert "host secret" not in dest.read_text(errors="replace")
  finally:
    secret.unlink()


def test_reset_restarts_processes_and_keeps_files(sb):
  sb.run("export X=1; cd /tmp; echo kept > /workspace/k; sleep 100 &")
  sb.reset()
  cmd = "echo ${X:-unset}; pwd; cat /workspace/k; pgrep -c -x -u agent sleep || true"
  assert sb.run(cmd).output == ("unset\n/workspace\nkept\n0\n")


def test_close_is_idempotent_and_removes_everything(make_sb):
  sb = make_sb()
  root = sb.root
  assert root.exists()
  sb.close()
  sb.close()
  assert not root.exists()
  with pytest.raises(SandboxError, match="closed"):
    sb.run("true")


# ------------------------------------------------------------------------------------ isolation
class _Handler(socketserver.BaseRequestHandler):
  def handle(self):
    self.request.sendall(b"host-server\n")


def test_no_network_egress_and_no_dns(sb):
  server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
  port = server.server_address[1]
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as conn:  # the server works
      assert conn.recv(64) == b"host-server\n"
    res = sb.run(
      f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); "
      f"print('CONNECTED')\"",
      timeout_s=30,
    )
    assert res.exit_code != 0 and "CONNECTED" not in res.output
    res = sb.run(
      'getent hosts deb.debian.org || echo DNS-FAILED; python3 -c "import socket; '
      "socket.getaddrinfo('deb.debian.org', 80)\" || echo PY-DNS-FAILED",
      timeout_s=30,
    )
    assert "DNS-FAILED" in res.output and "PY-DNS-FAILED" in res.output
    assert sb.run("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '").output.split() == [
      "lo"
    ]
  finally:
    server.shutdown()
    server.server_close()


def test_host_secret_unreadable_and_only_workspace_writable(sb):
  secret = pathlib.Path("/tmp") / f"tmax_secret_{uuid.uuid4().hex}"
  secret.write_text("host secret")
  home_secret = pathlib.Path("/root") / f".tmax_secret_{uuid.uuid4().hex}"
  home_secret.write_text("root secret")
  try:
    res = sb.run(f"cat {secret} {home_secret} /etc/shadow 2>&1; ls /root 2>&1 | head -3")
    assert "host secret" not in res.output and "root secret" not in res.output
    res = sb.run(
      "for p in /usr/x /etc/x /x /var/x /home/x /opt/x /root/x; do "
      "touch $p 2>/dev/null && echo WROTE $p; done; touch /workspace/ok /tmp/ok && echo fine"
    )
    assert "WROTE" not in res.output and res.output.endswith("fine\n")
    assert not any(
      pathlib.Path(p).exists() and p != "/x" for p in ("/usr/x", "/etc/x", "/var/x", "/opt/x")
    )
  finally:
    secret.unlink()
    home_secret.unlink()


def test_no_host_environment_variable_is_visible_inside(make_sb, monkeypatch):
  """A new user's API key in the launching shell must not reach any process of the sandbox
  (bwrap's pid 1 used to keep the host environment, readable as /proc/1/environ)."""
  planted = f"tmax-planted-{uuid.uuid4().hex}"
  monkeypatch.setenv("TMAX_PLANTED_API_KEY", planted)
  sb = make_sb()
  sb.run("sleep 30 &")  # one more process whose environ must be clean
  script = (
    "n=0; for f in /proc/[0-9]*/environ; do cat $f >/dev/null 2>&1 && n=$((n+1)); done; "
    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c TMAX_PLANTED; "
    "echo readable=$n"
  )
  for res in (sb.run(script), sb.exec(["bash", "-c", script])):
    count, readable = res.output.split()
    assert count == "0", res.output
    assert int(readable.split("=")[1]) >= 3  # pid 1, the shell, the sleep: the check can fail
  assert planted not in sb.run("env; cat /proc/1/environ").output


def test_commands_run_as_a_non_root_uid(sb):
  assert sb.run("id -u; id -g").output == "1000\n1000\n"
  sb.run("touch /workspace/owned")
  host_file = sb.binds["/workspace"] / "owned"
  assert host_file.stat().st_uid != 0  # not root on the host either
  assert "Permission denied" in sb.run("cat /etc/shadow").output


# ------------------------------------------------------------------------------------ limits
def test_fork_bomb_is_contained_and_others_go_on(make_sb):
  bomb = make_sb(limits=Limits(max_processes=64))
  other = make_sb()
  res = bomb.run(":(){ :|:& };:; sleep 5", timeout_s=30)
  assert res.status == "limit" and "process limit" in res.output
  assert other.run("echo alive").output == "alive\n"
  assert bomb.run("echo recovered").output == "recovered\n"
  pid = os.fork()
  if pid == 0:
    os._exit(0)
  os.waitpid(pid, 0)


def test_8gb_allocation_is_reported_as_oom(make_sb):
  sb = make_sb(limits=Limits(memory_mb=512))
  res = sb.run("python3 -c 'x = bytearray(8 << 30); print(len(x))'", timeout_s=60)
  assert res.status == "oom" and "out of memory" in res.output
  grow = sb.run("python3 -c '\na = []\nwhile True: a.append(bytearray(32 << 20))'", timeout_s=60)
  assert grow.status == "oom"
  assert sb.run("echo fine").output == "fine\n"


@pytest.mark.skipif(
  os.geteuid() != 0, reason="the disk limit is a size-limited tmpfs, mounted only as root"
)
def test_disk_filling_write_is_reported_as_limit(make_sb):
  sb = make_sb(limits=Limits(disk_mb=128, max_file_mb=1024))
  res = sb.run("dd if=/dev/zero of=/workspace/big bs=1M count=2000 status=none", timeout_s=60)
  assert res.status == "limit" and "resource limit" in res.output
  sb.run("rm -f /workspace/big")
  assert sb.run("echo small > /workspace/s && cat /workspace/s").output == "small\n"
  fsize = make_sb(limits=Limits(max_file_mb=16))
  res = fsize.run("head -c 64M /dev/zero > /tmp/big", timeout_s=60)
  assert res.status == "limit"


# ------------------------------------------------------------------------------------ bad input
def test_missing_image_is_a_clear_error(backend):
  image = "/nonexistent/rootfs" if backend != "podman" else "localhost/tmax-missing:none"
  with pytest.raises(SandboxError, match="nonexistent|missing|not"):
    open_sandbox(EnvironmentSpec(image=image), backend=backend)


@pytest.mark.parametrize(
  "field,kw,match",
  [
    ("workdir", {"workdir": "relative/dir"}, "workdir"),
    ("env", {"env": (("BAD NAME", "x"),)}, r"env\[0\]"),
    ("limits", {"limits": Limits(memory_mb=-1)}, "limits.memory_mb"),
    ("files", {"files": (("/nonexistent/seed", "/workspace/x"),)}, r"files\[0\]"),
  ],
)
def test_malformed_spec_names_the_field(rootfs, field, kw, match):
  with pytest.raises(SandboxError, match=match):
    open_sandbox(EnvironmentSpec(image=str(rootfs), **kw), backend="bubblewrap")


def test_binary_and_invalid_utf8_output(sb):
  res = sb.run("head -c 4000 /dev/urandom; printf '\\xff\\xfe tail-ok'")
  assert res.status == "ok" and res.output.endswith(" tail-ok") and "\ufffd" in res.output


def test_command_waiting_on_stdin_gets_eof(sb):
  start = time.monotonic()
  res = sb.run("cat; read x; echo got=${x}; python3 -c 'input()' 2>&1 | tail -1", timeout_s=20)
  assert res.status == "ok" and res.output.startswith("got=\n") and "EOFError" in res.output
  assert time.monotonic() - start < 10


def test_large_output_is_truncated_head_and_tail(sb):
  res = sb.run("seq 1 3000000", max_output_chars=1000)
  assert res.status == "ok" and res.exit_code == 0
  assert res.output.startswith("1\n2\n3\n") and res.output.endswith("2999999\n3000000\n")
  assert "output truncated" in res.output and len(res.output) < 1300


def test_gigabytes_of_output_never_hang(sb):
  start = time.monotonic()
  res = sb.run("head -c 3G /dev/zero | tr '\\0' a; echo", timeout_s=120)
  assert res.status == "output_limit" and "output limit" in res.output and len(res.output) < 11_000
  assert time.monotonic() - start < 60
  assert sb.run("echo next").output == "next\n"


def test_setup_commands_and_files_seed_the_sandbox(make_sb, tmp_path):
  seed = tmp_path / "seed.txt"
  seed.write_text("seeded")
  sb = make_sb(
    files=((str(seed), "/workspace/data/seed.txt"),),
    setup_commands=("cp data/seed.txt copy.txt", "export FROM_SETUP=1"),
    env=(("TASK_VAR", "v"),),
  )
  assert sb.run("pwd; cat copy.txt; echo $TASK_VAR").output == "/workspace\nseededv\n"
  with pytest.raises(SandboxError, match=r"setup_commands\[0\]"):
    make_sb(setup_commands=("exit 3",))


def test_killed_shell_is_restarted_with_state(sb):
  sb.run("export KEPT=1; cd /tmp")
  res = sb.run("kill -9 $PPID; sleep 1", timeout_s=20)
  assert res.status == "crashed" and "restarted" in res.output
  assert sb.run("echo $KEPT; pwd").output == "1\n/tmp\n"


def test_close_during_a_command_returns_promptly(make_sb):
  sb = make_sb()
  result = {}
  worker = threading.Thread(
    target=lambda: result.setdefault("r", sb.run("sleep 100", timeout_s=200))
  )
  worker.start()
  time.sleep(1.0)
  start = time.monotonic()
  sb.close()
  worker.join(timeout=30)
  assert not worker.is_alive() and time.monotonic() - start < 20
  assert result["r"].status == "crashed" and not sb.root.exists()


def test_logs_dir_is_the_trial_dir_and_survives_close(make_sb, tmp_path):
  trial = tmp_path / "trial"
  trial.mkdir()
  sb = make_sb(logs_dir=str(trial))
  sb.run("echo 1 > /logs/verifier/reward.txt; echo art > /logs/artifacts/a.txt")
  sb.close()
  assert (trial / "verifier" / "reward.txt").read_text() == "1\n"
  assert (trial / "artifacts" / "a.txt").read_text() == "art\n" and (trial / "agent").is_dir()


def test_exec_with_endless_output_stops_at_the_output_limit(make_sb):
  sb = make_sb(limits=Limits(max_output_mb=16))
  start = time.monotonic()
  res = sb.exec(["yes", "spam"], timeout_s=300)
  assert res.status == "output_limit" and res.exit_code is None and time.monotonic() - start < 30
  assert res.output.startswith("spam\nspam\n") and len(res.output) < 11_000
  assert sb.exec(["pgrep", "-c", "-x", "yes"]).output.strip() == "0"


def test_protocol_files_cannot_be_replaced_by_the_sandbox_user(sb):
  res = sb.run(
    "rm -f /tmp/.tmax/child.sh; echo 'echo HACKED' > /tmp/.tmax/child.sh; "
    "mv /tmp/.tmax/shell.sh /tmp/x 2>/dev/null; echo done"
  )
  assert res.output.strip().endswith("done")
  assert sb.run("echo still-fine").output == "still-fine\n"
  assert "HACKED" not in sb.run("true; echo ok").output
  token = sb._token.decode()
  assert (
    token not in sb.run("cat /tmp/.tmax/*.sh /tmp/.tmax/state.* 2>/dev/null; env; echo end").output
  )
