"""Shared helpers for tests/tasks (a plain module, not a conftest, to avoid clashes): run a
generated checker on the host, free ports, a local chat endpoint replaying recorded replies."""

import http.server
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading

from tmax_jax.tasks.generator import llm


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_checker_on_host(tests: dict, tmp: pathlib.Path) -> tuple[dict, str]:
  """Runs a generated tests/ bundle's checker.py on the host (logs: tmp/logs) -> (reward, out)."""
  tdir, logs = tmp / "tests", tmp / "logs"
  tdir.mkdir(exist_ok=True)
  for name, data in tests.items():
    (tdir / name).write_bytes(data)
  for f in logs.glob("*"):
    f.unlink()
  env = {**os.environ, "TMAX_VERIFIER_LOGS": str(logs)}
  proc = subprocess.run(
    [sys.executable, str(tdir / "checker.py"), str(tdir / "spec.json")],
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  out = proc.stdout + proc.stderr
  if proc.returncode != 0:
    raise RuntimeError(f"checker crashed:\n{out}")
  return json.loads((logs / "reward.json").read_text()), out


class ChatServer:
  """A real HTTP server speaking the /v1/chat/completions shape; replies are popped in order."""

  def __init__(self, replies):
    self.replies, self.requests = list(replies), []
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):  # /v1/models: lists nothing, so any model name is accepted
        data = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        outer.requests.append(
          {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
        )
        content = outer.replies.pop(0) if outer.replies else "out of replies"
        if isinstance(content, int):  # an HTTP error status; the client retries 429/5xx at once
          self.send_response(content)
          self.send_header("retry-after-ms", "1")
          self.send_header("Content-Length", "0")
          self.end_headers()
          return
        data = json.dumps(
          {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
              {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
              }
            ],
          }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def log_message(self, *args):
        pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.httpd.shutdown()
    self.httpd.server_close()

  def client(self):
    port = self.httpd.server_address[1]
    return llm.ChatClient(
      llm.ChatConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model="recorded", api_key="k", timeout_s=10
      )
    )
