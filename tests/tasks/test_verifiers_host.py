"""The generated checkers run as real subprocesses on the host: each kind passes a correct and fails
a wrong submission, and bad helper arguments are rejected with the parameter named."""

import json
import sys
import textwrap

import pytest
from tasks_helpers import free_port, run_checker_on_host

from tmax_jax.tasks import verifiers as V


def _work(tmp_path):
  w = tmp_path / "work"
  w.mkdir(exist_ok=True)
  return w


@pytest.mark.parametrize(
  "strictness,got,ok",
  [
    (2, "a b\nc\n", True),
    (2, "a b\nc", False),
    (1, "a b  \nc\n\n", True),
    (1, "a  b\nc\n", False),
    (0, "a\n b   c", True),
    (0, "a bc", False),
  ],
)
def test_exact_text_strictness(tmp_path, strictness, got, ok):
  w = _work(tmp_path)
  (w / "out.txt").write_text(got)
  tests = V.exact_text(
    [{"path": "out.txt", "expected": "a b\nc\n"}], strictness=strictness, workdir=str(w)
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward["reward"] == (1.0 if ok else 0.0), log


def test_exact_text_command_and_missing_file(tmp_path):
  w = _work(tmp_path)
  (w / "prog.sh").write_text("tr a-z A-Z\n")
  tests = V.exact_text(
    [
      {"command": "bash prog.sh", "stdin": "hello", "expected": "HELLO"},
      {"path": "missing.txt", "expected": "x"},
    ],
    workdir=str(w),
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward == {"reward": 0.0, "passed": 1, "total": 2}, log
  assert "cannot read" in log


def test_metric_threshold_accuracy_knob(tmp_path):
  w = _work(tmp_path)
  (w / "pred.txt").write_text("a\nb\nb\nd\n")  # 3 of 4 right
  for thr, want in ((0.75, 1.0), (0.8, 0.0)):
    tests = V.metric_threshold(
      "accuracy", thr, predictions="pred.txt", reference=["a", "b", "c", "d"], workdir=str(w)
    )
    reward, log = run_checker_on_host(tests, tmp_path)
    assert reward["reward"] == want, log


def test_metric_threshold_rmse_lower_is_better_and_missing(tmp_path):
  w = _work(tmp_path)
  (w / "pred.txt").write_text("1.0\n2.1\n")
  tests = V.metric_threshold(
    "rmse",
    0.1,
    higher_is_better=False,
    predictions="pred.txt",
    reference=[1.0, 2.0],
    workdir=str(w),
  )
  assert run_checker_on_host(tests, tmp_path)[0]["reward"] == 1.0
  (w / "pred.txt").unlink()
  assert run_checker_on_host(tests, tmp_path)[0]["reward"] == 0.0


def test_metric_threshold_speedup(tmp_path):
  w = _work(tmp_path)
  (w / "slow.sh").write_text("sleep 0.3; echo 42\n")
  (w / "fast.sh").write_text("echo 42\n")
  (w / "wrong.sh").write_text("echo 41\n")
  tests = V.metric_threshold(
    "speedup", 1.5, baseline="bash slow.sh", candidate="bash fast.sh", repeats=1, workdir=str(w)
  )
  assert run_checker_on_host(tests, tmp_path)[0]["reward"] == 1.0
  tests = V.metric_threshold(
    "speedup", 1.5, baseline="bash slow.sh", candidate="bash wrong.sh", repeats=1, workdir=str(w)
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward["reward"] == 0.0 and "differs" in log


FILTER = textwrap.dedent("""
  import sys
  data = sys.stdin.read()
  bad = any(k in data.lower() for k in ("drop table", "<script", "../"))
  sys.exit(1 if bad else 0)
""")


def test_adversarial_corpus(tmp_path):
  w = _work(tmp_path)
  (w / "good.py").write_text(FILTER)
  (w / "lax.py").write_text(FILTER.replace(', "../"', ""))  # misses path traversal
  benign = ["hello world", "select name from users", "a/b/c.txt"]
  malicious = ["1; DROP TABLE users", "<script>alert(1)</script>", "../../etc/passwd"]
  good = V.adversarial_corpus(f"{sys.executable} good.py", benign, malicious, workdir=str(w))
  assert run_checker_on_host(good, tmp_path)[0] == {"reward": 1.0, "passed": 6, "total": 6}
  lax = V.adversarial_corpus(f"{sys.executable} lax.py", benign, malicious, workdir=str(w))
  reward, log = run_checker_on_host(lax, tmp_path)
  assert reward == {"reward": 0.0, "passed": 5, "total": 6} and "etc/passwd" in log
  # knob: a pass rate of 5/6 is enough at min_pass_rate 0.8
  lax = V.adversarial_corpus(
    f"{sys.executable} lax.py", benign, malicious, min_pass_rate=0.8, workdir=str(w)
  )
  assert run_checker_on_host(lax, tmp_path)[0]["reward"] == 1.0


def test_adversarial_corpus_path_and_stdout_verdict(tmp_path):
  w = _work(tmp_path)
  (w / "judge.sh").write_text('if grep -q evil "$1"; then echo BLOCK; else echo ALLOW; fi\n')
  tests = V.adversarial_corpus(
    "bash judge.sh {path}",
    ["nice", "kind"],
    ["evil one", "so evil"],
    verdict="stdout",
    sample=3,
    seed=1,
    workdir=str(w),
  )
  reward, _ = run_checker_on_host(tests, tmp_path)
  assert reward == {"reward": 1.0, "passed": 3, "total": 3}


REF = "def reference(data):\n  return ' '.join(sorted(data.split(), key=int)) + '\\n'\n"


def test_fuzz_equivalence(tmp_path):
  w = _work(tmp_path)
  (w / "sort.py").write_text(
    "import sys\nprint(' '.join(sorted(sys.stdin.read().split(), key=int)))\n"
  )
  (w / "lexsort.py").write_text("import sys\nprint(' '.join(sorted(sys.stdin.read().split())))\n")
  gen = {"type": "ints", "min_len": 1, "max_len": 8, "lo": -50, "hi": 50}
  ok = V.fuzz_equivalence(
    f"{sys.executable} sort.py", gen, n=30, reference_code=REF, workdir=str(w)
  )
  assert run_checker_on_host(ok, tmp_path)[0]["reward"] == 1.0
  bad = V.fuzz_equivalence(
    f"{sys.executable} lexsort.py", gen, n=30, reference_code=REF, workdir=str(w)
  )
  reward, log = run_checker_on_host(bad, tmp_path)
  assert reward["reward"] == 0.0 and "differs" in log


def test_fuzz_equivalence_reference_command_and_edge_cases(tmp_path):
  w = _work(tmp_path)
  (w / "rev.sh").write_text("rev\n")
  extra = {"ref.py": b"import sys\nfor l in sys.stdin.read().splitlines(): print(l[::-1])\n"}
  tests = V.fuzz_equivalence(
    "bash rev.sh",
    {"type": "lines", "line": {"type": "text", "alphabet": "xyz"}},
    n=10,
    reference_command=f"{sys.executable} {tmp_path}/tests/ref.py",
    edge_cases=["ab\n"],
    workdir=str(w),
    extra=extra,
  )
  assert run_checker_on_host(tests, tmp_path)[0]["reward"] == 1.0
  (w / "rev.sh").write_text("cat\n")
  assert run_checker_on_host(tests, tmp_path)[0]["reward"] == 0.0


SERVER = textwrap.dedent("""
  import http.server, json, socketserver, sys, threading
  hp, tp = int(sys.argv[1]), int(sys.argv[2])
  class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
      body = json.dumps({"status": "ok"}).encode()
      self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
      self.wfile.write(body)
    def log_message(self, *a): pass
  class T(socketserver.StreamRequestHandler):
    def handle(self):
      line = self.rfile.readline().decode().strip()
      self.wfile.write(("PONG\\n" if line == "PING" else "ERR\\n").encode())
  socketserver.TCPServer.allow_reuse_address = True
  threading.Thread(target=socketserver.TCPServer(("127.0.0.1", tp), T).serve_forever, daemon=True).start()
  http.server.HTTPServer(("127.0.0.1", hp), H).serve_forever()
""")  # noqa: E501 (embedded script, kept verbatim)


def test_multi_protocol_http_and_tcp(tmp_path):
  w = _work(tmp_path)
  (w / "server.py").write_text(SERVER)
  hp, tp = free_port(), free_port()
  probes = [
    {"protocol": "http", "port": hp, "path": "/health", "expect_json": {"status": "ok"}},
    {"protocol": "tcp", "port": tp, "send": "PING\n", "expect": "PONG\n"},
  ]
  tests = V.multi_protocol(
    probes, start_command=f"{sys.executable} server.py {hp} {tp}", workdir=str(w)
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward == {"reward": 1.0, "passed": 2, "total": 2}, log
  # a wrong service: the TCP side answers ERR
  (w / "server.py").write_text(SERVER.replace('"PONG\\n" if', '"ERR\\n" if'))
  tests = V.multi_protocol(
    probes, start_command=f"{sys.executable} server.py {hp} {tp}", workdir=str(w)
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward == {"reward": 0.0, "passed": 1, "total": 2}, log


def test_multi_protocol_nothing_listening(tmp_path):
  w = _work(tmp_path)
  tests = V.multi_protocol(
    [{"protocol": "tcp", "port": free_port(), "send": "x", "expect": "y"}],
    startup_timeout_s=0.5,
    workdir=str(w),
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward["reward"] == 0.0 and "nothing listens" in log


def test_bundle_layout_and_argument_errors():
  files = V.exact_text([{"path": "a", "expected": "b"}])
  assert set(files) == {"test.sh", "checker.py", "spec.json"}
  assert b"python3 -I /tests/checker.py" in files["test.sh"]
  assert json.loads(files["spec.json"])["kind"] == "exact_text"
  with pytest.raises(ValueError, match="strictness"):
    V.exact_text([{"path": "a", "expected": "b"}], strictness=5)
  with pytest.raises(ValueError, match=r"targets\[0\]"):
    V.exact_text([{"path": "a", "command": "c", "expected": "b"}])
  with pytest.raises(ValueError, match="predictions"):
    V.metric_threshold("accuracy", 0.5, reference=[1])
  with pytest.raises(ValueError, match="min_pass_rate"):
    V.adversarial_corpus("x", ["a"], ["b"], min_pass_rate=0)
  with pytest.raises(ValueError, match="reference_code/reference_command"):
    V.fuzz_equivalence("x", {"type": "ints"})
  with pytest.raises(ValueError, match=r"probes\[0\].protocol"):
    V.multi_protocol([{"protocol": "gopher", "port": 70}])
  with pytest.raises(ValueError, match="overwrite"):
    V.exact_text([{"path": "a", "expected": "b"}], extra={"spec.json": b"{}"})


SMTP_UDP_SERVER = textwrap.dedent("""
  import os, socketserver, sys, threading
  sp, up, spool = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
  class Smtp(socketserver.StreamRequestHandler):
    def handle(self):
      w = lambda s: self.wfile.write((s + "\\r\\n").encode())
      w("220 mini ESMTP")
      data, body = False, []
      for raw in self.rfile:
        line = raw.decode().rstrip("\\r\\n")
        if data:
          if line == ".":
            data = False
            open(spool, "w").write("\\n".join(body))
            w("250 queued")
          else:
            body.append(line)
        elif line.upper().startswith(("EHLO", "HELO")):
          w("250 mini")
        elif line.upper().startswith(("MAIL", "RCPT", "RSET", "NOOP")):
          w("250 ok")
        elif line.upper() == "DATA":
          data = True
          w("354 go ahead")
        elif line.upper() == "QUIT":
          w("221 bye")
          return
        else:
          w("502 no")
  class Udp(socketserver.BaseRequestHandler):
    def handle(self):
      data, sock = self.request
      sock.sendto(data.upper(), self.client_address)
  socketserver.TCPServer.allow_reuse_address = True
  threading.Thread(target=socketserver.UDPServer(("127.0.0.1", up), Udp).serve_forever, daemon=True).start()
  socketserver.ThreadingTCPServer(("127.0.0.1", sp), Smtp).serve_forever()
""")  # noqa: E501 (embedded script, kept verbatim)


def test_multi_protocol_smtp_and_udp(tmp_path):
  w = _work(tmp_path)
  (w / "mail.py").write_text(SMTP_UDP_SERVER)
  sp, up = free_port(), free_port()
  probes = [
    {
      "protocol": "smtp",
      "port": sp,
      "from": "a@x.org",
      "to": ["b@y.org"],
      "data": "Subject: hi\r\n\r\nbody\r\n",
      "expect_file": "spool.txt",
    },
    {"protocol": "udp", "port": up, "send": "ping", "expect": "PING"},
  ]
  tests = V.multi_protocol(
    probes, start_command=f"{sys.executable} mail.py {sp} {up} spool.txt", workdir=str(w)
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward == {"reward": 1.0, "passed": 2, "total": 2}, log
  assert "Subject: hi" in (w / "spool.txt").read_text()
  # a server that never spools the message fails the smtp condition; a udp echo without upper-casing
  # fails too
  (w / "spool.txt").unlink()
  (w / "mail.py").write_text(
    SMTP_UDP_SERVER.replace('open(spool, "w").write', "len").replace("data.upper()", "data")
  )
  reward, log = run_checker_on_host(tests, tmp_path)
  assert reward == {"reward": 0.0, "passed": 0, "total": 2}, log
