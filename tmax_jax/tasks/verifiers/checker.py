#!/usr/bin/env python3
"""The hidden checker copied into every generated task's tests/ (python3 standard library only).

Usage inside the sandbox:  python3 /tests/checker.py /tests/spec.json
spec["kind"] selects exact_text | metric_threshold | adversarial_corpus | fuzz_equivalence |
multi_protocol. Writes /logs/verifier/reward.json ({"reward", "passed", "total"}) and reward.txt.
A failure of the submission (wrong output, crash, timeout, closed port) is reward 0; only a broken
spec makes this script exit without a reward, which the runner reports as a broken verifier.
Kept compatible with Python 3.9 because the sandbox image's python3 is not this repo's.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import random
import re
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import time

LOG_DIR = os.environ.get("TMAX_VERIFIER_LOGS", "/logs/verifier")


def log(msg: str) -> None:
  print(msg, flush=True)


def run_cmd(
  cmd: str, cwd: str, stdin: bytes = b"", timeout: float = 30.0
) -> tuple[int | None, bytes, float]:
  """bash -c cmd -> (exit code or None on timeout, stdout, seconds); a timeout kills the group."""
  start = time.monotonic()
  proc = subprocess.Popen(
    ["bash", "-c", cmd],
    cwd=cwd,
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    start_new_session=True,
  )
  try:
    out, err = proc.communicate(stdin, timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    return None, b"", time.monotonic() - start
  if err:
    sys.stdout.write(err.decode(errors="replace")[-2000:])
  return proc.returncode, out, time.monotonic() - start


def resolve(path: str, workdir: str) -> str:
  return path if path.startswith("/") else os.path.join(workdir, path)


# ----------------------------------------------------------------------------------------------
# exact_text: knob = strictness (0 token-equal, 1 trailing whitespace ignored, 2 byte-exact)


def normalize(text: str, strictness: int) -> str:
  if strictness >= 2:
    return text
  if strictness == 1:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())
  return " ".join(text.split())


def check_exact_text(spec: dict, workdir: str) -> tuple[int, int]:
  passed = 0
  for i, t in enumerate(spec["targets"]):
    if "path" in t:
      p = resolve(t["path"], workdir)
      try:
        with open(p, "rb") as f:
          got = f.read().decode("utf-8", errors="replace")
      except OSError as err:
        log(f"target {i}: cannot read {p}: {err}")
        continue
    else:
      code, out, _ = run_cmd(
        t["command"], workdir, t.get("stdin", "").encode(), t.get("timeout_s", 30)
      )
      if code is None:
        log(f"target {i}: command timed out: {t['command']}")
        continue
      got = out.decode("utf-8", errors="replace")
    ok = normalize(got, spec["strictness"]) == normalize(t["expected"], spec["strictness"])
    log(f"target {i}: {'PASS' if ok else 'FAIL'} ({t.get('path') or t.get('command')})")
    if not ok:
      log(f"  expected {t['expected'][:300]!r}\n  got      {got[:300]!r}")
    passed += ok
  return passed, len(spec["targets"])


# ----------------------------------------------------------------------------------------------
# metric_threshold: knob = threshold


def read_values(path: str) -> list[str]:
  with open(path, encoding="utf-8", errors="replace") as f:
    return [line.strip() for line in f if line.strip()]


def metric_value(spec: dict, workdir: str) -> float:
  m = spec["metric"]
  if m in ("accuracy", "rmse", "mae"):
    got = read_values(resolve(spec["predictions"], workdir))
    ref = spec["reference"]
    if len(got) != len(ref):
      log(f"expected {len(ref)} predictions, got {len(got)}")
      return math.nan
    if m == "accuracy":
      return sum(g == str(r) for g, r in zip(got, ref, strict=False)) / max(1, len(ref))
    errs = [float(g) - float(r) for g, r in zip(got, ref, strict=False)]
    if m == "rmse":
      return math.sqrt(sum(e * e for e in errs) / max(1, len(errs)))
    return sum(abs(e) for e in errs) / max(1, len(errs))
  if m == "speedup":
    times = {}
    outs = {}
    for name in ("baseline", "candidate"):
      best = math.inf
      for _ in range(spec.get("repeats", 3)):
        code, out, secs = run_cmd(
          spec[name], workdir, spec.get("stdin", "").encode(), spec.get("timeout_s", 120)
        )
        if code != 0:
          log(f"{name} command failed (exit {code}): {spec[name]}")
          return math.nan
        best = min(best, secs)
        outs[name] = out
      times[name] = best
    if spec.get("same_output", True) and outs["baseline"] != outs["candidate"]:
      log("candidate output differs from the baseline output")
      return math.nan
    log(f"baseline {times['baseline']:.4f}s candidate {times['candidate']:.4f}s")
    return times["baseline"] / max(times["candidate"], 1e-6)
  if m == "command":  # a command printing the metric as its last line
    code, out, _ = run_cmd(spec["command"], workdir, b"", spec.get("timeout_s", 120))
    lines = out.decode(errors="replace").strip().splitlines()
    if code != 0 or not lines:
      log(f"metric command failed (exit {code})")
      return math.nan
    return float(lines[-1].split()[-1])
  if m == "python":  # spec["code"] defines metric(workdir) -> float
    scope: dict = {}
    exec(compile(spec["code"], "metric_code", "exec"), scope)
    return float(scope["metric"](workdir))
  raise ValueError(f"spec.metric: unknown metric {m!r}")


def check_metric_threshold(spec: dict, workdir: str) -> tuple[int, int]:
  try:
    value = metric_value(spec, workdir)
  except (OSError, ValueError, ZeroDivisionError) as err:
    if isinstance(err, ValueError) and str(err).startswith("spec."):
      raise
    log(f"metric could not be computed: {err}")
    return 0, 1
  thr = spec["threshold"]
  ok = (not math.isnan(value)) and (
    value >= thr if spec.get("higher_is_better", True) else value <= thr
  )
  log(
    f"{spec['metric']} = {value:.6g} (threshold "
    f"{'>=' if spec.get('higher_is_better', True) else '<='} {thr}): {'PASS' if ok else 'FAIL'}"
  )
  return int(ok), 1


# ----------------------------------------------------------------------------------------------
# adversarial_corpus: knob = sample size and min_pass_rate


def classify(spec: dict, item: str, workdir: str) -> bool | None:
  """True = accepted, False = rejected, None = crashed / timed out."""
  cmd, stdin = spec["command"], item.encode()
  path = None
  if "{path}" in cmd:
    fd, path = tempfile.mkstemp(prefix="item_", dir=spec.get("item_dir") or None)
    with os.fdopen(fd, "wb") as f:
      f.write(item.encode())
    cmd, stdin = cmd.replace("{path}", path), b""
  try:
    code, out, _ = run_cmd(cmd, workdir, stdin, spec.get("timeout_s", 10))
  finally:
    if path:
      os.unlink(path)
  if code is None:
    return None
  if spec.get("verdict", "exit_code") == "exit_code":
    return code == 0
  word = out.decode(errors="replace").strip().split()
  if not word or word[0].upper() not in ("ALLOW", "BLOCK"):
    return None
  return word[0].upper() == "ALLOW"


def check_adversarial_corpus(spec: dict, workdir: str) -> tuple[int, int]:
  items = [(x, True) for x in spec["benign"]] + [(x, False) for x in spec["malicious"]]
  if spec.get("sample"):
    rng = random.Random(spec.get("seed", 0))
    items = rng.sample(items, min(spec["sample"], len(items)))
  passed = 0
  for i, (item, benign) in enumerate(items):
    verdict = classify(spec, item, workdir)
    ok = verdict is benign
    passed += ok
    if not ok:
      want = "accepted" if benign else "rejected"
      log(
        f"item {i} ({'benign' if benign else 'malicious'}) should be {want}; verdict={verdict}: "
        f"{item[:120]!r}"
      )
  rate = passed / max(1, len(items))
  log(f"{passed}/{len(items)} items handled correctly (need {spec.get('min_pass_rate', 1.0):.2f})")
  return (
    (len(items), len(items)) if rate >= spec.get("min_pass_rate", 1.0) else (passed, len(items))
  )


# ----------------------------------------------------------------------------------------------
# fuzz_equivalence: knob = n and the input distribution


def gen_input(g: dict, rng: random.Random) -> str:
  t = g.get("type", "text")
  if t == "ints":
    k = rng.randint(g.get("min_len", 1), g.get("max_len", 10))
    vals = [str(rng.randint(g.get("lo", -100), g.get("hi", 100))) for _ in range(k)]
    return g.get("sep", " ").join(vals) + "\n"
  if t == "text":
    alphabet = g.get("alphabet", "abcdefghijklmnopqrstuvwxyz ")
    k = rng.randint(g.get("min_len", 0), g.get("max_len", 40))
    return "".join(rng.choice(alphabet) for _ in range(k)) + (
      "\n" if g.get("newline", True) else ""
    )
  if t == "lines":
    sub = dict(g.get("line", {"type": "text"}), newline=False)
    k = rng.randint(g.get("min_lines", 1), g.get("max_lines", 10))
    return "".join(gen_input(sub, rng).rstrip("\n") + "\n" for _ in range(k))
  if t == "choice":
    return rng.choice(g["values"])
  if t == "python":  # g["code"] defines gen(rng) -> str
    scope: dict = {}
    exec(compile(g["code"], "generator_code", "exec"), scope)
    return scope["gen"](rng)
  raise ValueError(f"spec.generator.type: unknown input type {t!r}")


def reference_output(spec: dict, data: str, workdir: str, scope: dict) -> bytes | None:
  if "reference_code" in spec:
    if "reference" not in scope:
      exec(compile(spec["reference_code"], "reference_code", "exec"), scope)
    return scope["reference"](data).encode()
  code, out, _ = run_cmd(
    spec["reference_command"], workdir, data.encode(), spec.get("timeout_s", 10)
  )
  if code != 0:
    raise RuntimeError(f"the reference command failed (exit {code}) on input {data[:200]!r}")
  return out


def check_fuzz_equivalence(spec: dict, workdir: str) -> tuple[int, int]:
  rng = random.Random(spec.get("seed", 0))
  inputs = list(spec.get("edge_cases", [])) + [
    gen_input(spec["generator"], rng) for _ in range(spec["n"])
  ]
  scope: dict = {}
  for i, data in enumerate(inputs):
    want = reference_output(spec, data, workdir, scope)
    code, got, _ = run_cmd(spec["command"], workdir, data.encode(), spec.get("timeout_s", 10))
    if code != 0 or got != want:
      log(
        f"input {i} differs (exit {code}): input {data[:200]!r}\n  expected {want[:200]!r}\n"
        f"  got {got[:200]!r}"
      )
      return i, len(inputs)
  log(f"all {len(inputs)} inputs match the reference")
  return len(inputs), len(inputs)


# ----------------------------------------------------------------------------------------------
# multi_protocol: knob = number of probes (protocols / conditions)


def wait_port(host: str, port: int, timeout: float) -> bool:
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    try:
      with socket.create_connection((host, port), timeout=1.0):
        return True
    except OSError:
      time.sleep(0.1)
  return False


def matches(got: str, want: str, how: str) -> bool:
  if how == "exact":
    return got == want
  if how == "strip":
    return got.strip() == want.strip()
  if how == "contains":
    return want in got
  if how == "regex":
    return re.search(want, got) is not None
  raise ValueError(f"spec.probes.match: unknown match mode {how!r}")


def probe_http(p: dict, host: str) -> bool:
  conn = http.client.HTTPConnection(host, p["port"], timeout=p.get("timeout_s", 5))
  body = p.get("body")
  if isinstance(body, (dict, list)):
    body = json.dumps(body)
  conn.request(p.get("method", "GET"), p.get("path", "/"), body=body, headers=p.get("headers", {}))
  resp = conn.getresponse()
  text = resp.read().decode(errors="replace")
  conn.close()
  if resp.status != p.get("expect_status", 200):
    log(f"  status {resp.status}, expected {p.get('expect_status', 200)}")
    return False
  if "expect_json" in p:
    try:
      got = json.loads(text)
    except json.JSONDecodeError:
      log(f"  body is not JSON: {text[:200]!r}")
      return False
    if got != p["expect_json"]:
      log(f"  json {got!r} != {p['expect_json']!r}")
      return False
  if "expect_body" in p and not matches(text, p["expect_body"], p.get("match", "strip")):
    log(f"  body {text[:200]!r} does not match {p['expect_body'][:200]!r}")
    return False
  return True


def probe_tcp(p: dict, host: str) -> bool:
  with socket.create_connection((host, p["port"]), timeout=p.get("timeout_s", 5)) as s:
    s.sendall(p.get("send", "").encode())
    if p.get("shutdown_write", False):
      s.shutdown(socket.SHUT_WR)
    want, how, buf = p.get("expect", ""), p.get("match", "strip"), b""
    deadline = time.monotonic() + p.get("timeout_s", 5)
    while time.monotonic() < deadline:
      done = (
        len(buf) >= len(want.encode())
        if how == "exact"
        else matches(buf.decode(errors="replace"), want, how)
      )
      if want and done:
        break
      try:
        chunk = s.recv(65536)
      except TimeoutError:
        break
      if not chunk:
        break
      buf += chunk
  got = buf.decode(errors="replace")
  ok = matches(got, want, how)
  if not ok:
    log(f"  tcp reply {got[:200]!r} does not match {want[:200]!r}")
  return ok


def probe_udp(p: dict, host: str) -> bool:
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.settimeout(p.get("timeout_s", 5))
    s.sendto(p.get("send", "").encode(), (host, p["port"]))
    try:
      got = s.recv(65536).decode(errors="replace")
    except TimeoutError:
      log("  no udp reply")
      return False
  ok = matches(got, p.get("expect", ""), p.get("match", "strip"))
  if not ok:
    log(f"  udp reply {got[:200]!r} does not match {p.get('expect', '')[:200]!r}")
  return ok


def probe_smtp(p: dict, host: str) -> bool:
  with smtplib.SMTP(host, p["port"], timeout=p.get("timeout_s", 5)) as s:
    s.sendmail(
      p.get("from", "a@example.com"),
      p.get("to", ["b@example.com"]),
      p.get("data", "Subject: t\r\n\r\nhi\r\n"),
    )
  return True


PROBES = {"http": probe_http, "tcp": probe_tcp, "udp": probe_udp, "smtp": probe_smtp}


def check_multi_protocol(spec: dict, workdir: str) -> tuple[int, int]:
  host = spec.get("host", "127.0.0.1")
  server = None
  if spec.get("start_command"):
    server = subprocess.Popen(
      ["bash", "-c", spec["start_command"]],
      cwd=workdir,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
      start_new_session=True,
    )
  try:
    for port in sorted({p["port"] for p in spec["probes"] if p["protocol"] != "udp"}):
      if not wait_port(host, port, spec.get("startup_timeout_s", 10)):
        log(f"nothing listens on {host}:{port}")
    passed = 0
    for i, p in enumerate(spec["probes"]):
      fn = PROBES.get(p["protocol"])
      if fn is None:
        raise ValueError(f"spec.probes[{i}].protocol: unknown protocol {p['protocol']!r}")
      try:
        ok = fn(p, host)
      except (OSError, smtplib.SMTPException, http.client.HTTPException) as err:
        log(f"  {type(err).__name__}: {err}")
        ok = False
      if ok and p.get("expect_file") and not os.path.exists(resolve(p["expect_file"], workdir)):
        log(f"  expected the file {p['expect_file']} after the probe")
        ok = False
      log(f"probe {i} {p['protocol']}:{p['port']}: {'PASS' if ok else 'FAIL'}")
      passed += ok
    return passed, len(spec["probes"])
  finally:
    if server is not None:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
      server.wait()


CHECKS = {
  "exact_text": check_exact_text,
  "metric_threshold": check_metric_threshold,
  "adversarial_corpus": check_adversarial_corpus,
  "fuzz_equivalence": check_fuzz_equivalence,
  "multi_protocol": check_multi_protocol,
}


def write_reward(passed: int, total: int) -> float:
  reward = 1.0 if total > 0 and passed == total else 0.0
  os.makedirs(LOG_DIR, exist_ok=True)
  with open(os.path.join(LOG_DIR, "reward.json"), "w") as f:
    json.dump({"reward": reward, "passed": passed, "total": total}, f)
  with open(os.path.join(LOG_DIR, "reward.txt"), "w") as f:
    f.write(f"{reward:g}\n")
  return reward


def main(argv: list[str]) -> int:
  spec_path = (
    argv[1]
    if len(argv) > 1
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "spec.json")
  )
  with open(spec_path, encoding="utf-8") as f:
    spec = json.load(f)
  check = CHECKS.get(spec.get("kind"))
  if check is None:
    raise SystemExit(
      f"{spec_path}: kind: expected one of {sorted(CHECKS)}, got {spec.get('kind')!r}"
    )
  workdir = spec.get("workdir", "/workspace")
  if os.path.isdir(workdir):
    passed, total = check(spec, workdir)
  else:  # the submission removed its own working directory
    log(f"the workdir {workdir} is gone")
    passed, total = 0, 1
  reward = write_reward(passed, total)
  log(f"reward {reward:g} ({passed}/{total})")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
