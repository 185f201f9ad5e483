"""multi_protocol families: services the agent starts, probed over HTTP and raw TCP in the sandbox.

Every task asks for a /workspace/start.sh that launches the service(s) in the background; the
checker probes the ports and, if nothing listens (e.g. the sandbox was restarted), runs start.sh
once.
"""

from __future__ import annotations

import json
import random

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

START_NOTE = (
  "\nAlso write /workspace/start.sh that starts your service(s) in the background (detached, "
  "output to a log file) and returns; leave the service(s) running when you finish."
)


def _ports(rng, n):
  return rng.sample(range(8100, 8999), n)


def _start_sh(*cmds):
  body = "".join(
    f"setsid nohup {c} > /tmp/{i}.log 2>&1 < /dev/null &\n" for i, c in enumerate(cmds)
  )
  return f"cat > start.sh <<'SH'\n#!/bin/bash\ncd /workspace\n{body}sleep 0.5\nSH\nbash start.sh"


KV_SERVER = """
import csv, json, socketserver, threading, http.server, urllib.parse
DATA = {r["key"]: r["value"] for r in csv.DictReader(open("/workspace/records.csv"))}
class H(http.server.BaseHTTPRequestHandler):
  def do_GET(self):
    u = urllib.parse.urlsplit(self.path); q = urllib.parse.parse_qs(u.query)
    if u.path == "/get" and "key" in q and (MISSING_OK or q["key"][0] in DATA):
      body, code = json.dumps({"key": q["key"][0], "value": DATA.get(q["key"][0])}), 200
    elif u.path == "/get":
      body, code = json.dumps({"error": "not found"}), 404
    else:
      body, code = "{}", 404
    self.send_response(code); self.send_header("Content-Type", "application/json"); self.end_headers()
    self.wfile.write(body.encode())
  def log_message(self, *a):
    pass
class T(socketserver.StreamRequestHandler):
  def handle(self):
    for line in self.rfile:
      w = line.decode().split()
      if len(w) == 2 and w[0] == "GET":
        out = f"VALUE {DATA[w[1]]}" if w[1] in DATA else "MISSING"
      elif w == ["COUNT"]:
        out = f"COUNT {len(DATA)}"
      else:
        out = "ERROR"
      self.wfile.write((out + "\\n").encode())
socketserver.ThreadingTCPServer.allow_reuse_address = True
if TCP_PORT:
  threading.Thread(target=socketserver.ThreadingTCPServer(("127.0.0.1", TCP_PORT), T).serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", HTTP_PORT), H).serve_forever()
"""  # noqa: E501 (embedded script, kept verbatim)

KV_CHECK = """
ports = [p for p in (DATA["http"], DATA["tcp"]) if p]
ensure_services(ports)
for k, v in DATA["probe"]:
  code, body = http("GET", DATA["http"], f"/get?key={k}")
  try:
    got = json.loads(body)
  except ValueError:
    fail(f"GET /get?key={k}: not JSON: {body[:100]!r}")
  if code != 200 or got.get("value") != v or got.get("key") != k:
    fail(f"GET /get?key={k}: {code} {body[:100]!r}, expected value {v!r}")
  if DATA["tcp"] and tcp(DATA["tcp"], f"GET {k}\\n") != f"VALUE {v}":
    fail(f"TCP GET {k}: {tcp(DATA['tcp'], f'GET {k}' + chr(10))!r}")
code, body = http("GET", DATA["http"], f"/get?key={DATA['missing']}")
if code != 404:
  fail(f"missing key: HTTP {code}, expected 404")
if DATA["tcp"] and tcp(DATA["tcp"], f"GET {DATA['missing']}\\n") != "MISSING":
  fail("TCP GET of a missing key must answer MISSING")
if DATA["count"] and tcp(DATA["tcp"], "COUNT\\n") != f"COUNT {DATA['n']}":
  fail("TCP COUNT is wrong")
"""


def kv_service(rng: random.Random, level: int) -> TaskSpec:
  http_port, tcp_port = _ports(rng, 2)
  tcp_port = tcp_port if level >= 1 else 0
  recs = {f"{util.word(rng)}-{i}": util.token(rng, 10) for i in range((10, 100, 500)[level])}
  body = "key,value\n" + "".join(f"{k},{v}\n" for k, v in recs.items())
  spec = [
    f"HTTP on 127.0.0.1:{http_port}: `GET /get?key=<key>` answers 200 with JSON "
    '`{"key": <key>, "value": <value>}`; an unknown key answers 404'
  ]
  if tcp_port:
    spec.append(
      f"raw TCP on 127.0.0.1:{tcp_port}, one command per line: `GET <key>` answers "
      "`VALUE <value>` or `MISSING`; a connection may send several commands"
    )
  if level >= 2:
    spec.append("the TCP command `COUNT` answers `COUNT <number of records>`")
  instruction = (
    "Serve the records in /workspace/records.csv (columns key,value):\n"
    + "".join(f"- {s}\n" for s in spec)
    + START_NOTE
  )
  server = (
    KV_SERVER.replace("MISSING_OK", "False")
    .replace("TCP_PORT", str(tcp_port))
    .replace("HTTP_PORT", str(http_port))
  )
  solve = f"cat > kv_server.py <<'PY'\n{server}\nPY\n" + _start_sh("python3 kv_server.py")
  wrong = solve.replace("(False or q", "(True or q")
  probe = rng.sample(sorted(recs.items()), min(8, len(recs)))
  return TaskSpec(
    instruction,
    KV_CHECK,
    solve,
    wrong,
    files={"records.csv": body},
    data={
      "http": http_port,
      "tcp": tcp_port,
      "probe": probe,
      "missing": "no-such-key",
      "count": level >= 2,
      "n": len(recs),
    },
    language="python",
    complexity="moderate",
  )


BACKEND = '''"""The team's key-value backend: one TCP command per line, GET <k> / SET <k> <v>."""
import json, socketserver, sys
PORT = int(sys.argv[1]) if len(sys.argv) > 1 else BACKEND_PORT
STORE = json.load(open("/workspace/backend_data.json"))
class H(socketserver.StreamRequestHandler):
  def handle(self):
    for line in self.rfile:
      w = line.decode().rstrip("\\n").split(" ", 2)
      if w[0] == "GET" and len(w) == 2:
        out = "VALUE " + STORE[w[1]] if w[1] in STORE else "MISSING"
      elif w[0] == "SET" and len(w) == 3:
        STORE[w[1]] = w[2]; out = "OK"
      else:
        out = "ERROR"
      self.wfile.write((out + "\\n").encode())
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", PORT), H).serve_forever()
'''

GATEWAY = """
import http.server, socket
def backend(cmd):
  with socket.create_connection(("127.0.0.1", BACKEND_PORT), timeout=5) as s:
    s.sendall((cmd + "\\n").encode())
    buf = b""
    while not buf.endswith(b"\\n"):
      c = s.recv(4096)
      if not c:
        break
      buf += c
  return buf.decode().rstrip("\\n")
class H(http.server.BaseHTTPRequestHandler):
  def reply(self, code, body=""):
    self.send_response(code); self.send_header("Content-Length", str(len(body.encode()))); self.end_headers()
    self.wfile.write(body.encode())
  def do_GET(self):
    if self.path == "/health":
      try:
        backend("GET __health__"); return self.reply(200, "ok")
      except OSError:
        return self.reply(503, "backend down")
    if not self.path.startswith("/kv/"):
      return self.reply(404)
    r = backend("GET " + self.path[4:])
    self.reply(200, r[6:]) if r.startswith("VALUE ") else self.reply(404)
  def do_PUT(self):
    if not self.path.startswith("/kv/"):
      return self.reply(404)
    v = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
    self.reply(204) if backend(f"SET {self.path[4:]} {v}") == "OK" else self.reply(502)
  def log_message(self, *a):
    pass
http.server.ThreadingHTTPServer(("127.0.0.1", GATEWAY_PORT), H).serve_forever()
"""  # noqa: E501 (embedded script, kept verbatim)

GATEWAY_CHECK = """
ensure_services([DATA["backend"], DATA["gateway"]])
for k, v in DATA["probe"]:
  code, body = http("GET", DATA["gateway"], f"/kv/{k}")
  if (code, body) != (200, v):
    fail(f"GET /kv/{k}: {code} {body[:80]!r}, expected 200 {v!r}")
if http("GET", DATA["gateway"], "/kv/nope-missing")[0] != 404:
  fail("a missing key must answer 404")
# a value changed in the backend must show through the gateway (it has to talk to the backend)
k = DATA["probe"][0][0]
if tcp(DATA["backend"], f"SET {k} {DATA['fresh']}\\n") != "OK":
  fail("backend did not accept SET")
code, body = http("GET", DATA["gateway"], f"/kv/{k}")
if body != DATA["fresh"]:
  fail(f"gateway returned {body!r} after the backend changed; it must query the backend")
if DATA["put"]:
  code, _ = http("PUT", DATA["gateway"], "/kv/newkey", body=DATA["fresh2"].encode())
  if code != 204 or tcp(DATA["backend"], "GET newkey\\n") != "VALUE " + DATA["fresh2"]:
    fail(f"PUT /kv/newkey did not store the value in the backend (HTTP {code})")
if DATA["health"] and http("GET", DATA["gateway"], "/health") != (200, "ok"):
  fail("GET /health must answer 200 ok")
"""


def gateway(rng: random.Random, level: int) -> TaskSpec:
  bport, gport = _ports(rng, 2)
  store = {f"{util.word(rng)}{i}": util.token(rng, 8) for i in range((5, 30, 100)[level])}
  spec = [
    "`GET /kv/<key>` answers 200 with the backend's value as the body, or 404 when the backend "
    "says MISSING"
  ]
  if level >= 1:
    spec.append(
      "`PUT /kv/<key>` with the value as the request body stores it in the backend (SET) and "
      "answers 204"
    )
  if level >= 2:
    spec.append("`GET /health` answers 200 with body `ok` when the backend is reachable")
  instruction = (
    f"/workspace/backend.py is our key-value backend (raw TCP on 127.0.0.1:{bport}, protocol in "
    f"the file). Start it, and write an HTTP gateway on 127.0.0.1:{gport} that talks to the "
    "backend over TCP for every request (the backend's data changes at run time; never read its "
    "data file):\n"
    + "".join(f"- {s}\n" for s in spec)
    + START_NOTE
    + " start.sh must start both the backend and the gateway."
  )
  gw = GATEWAY.replace("BACKEND_PORT", str(bport)).replace("GATEWAY_PORT", str(gport))
  solve = f"cat > gateway.py <<'PY'\n{gw}\nPY\n" + _start_sh(
    "python3 backend.py", "python3 gateway.py"
  )
  wrong_gw = gw.replace(
    'r = backend("GET " + self.path[4:])',
    'import json; d = json.load(open("/workspace/backend_data.json")); '
    'r = "VALUE " + d[self.path[4:]] if self.path[4:] in d else "MISSING"',
  )
  wrong = f"cat > gateway.py <<'PY'\n{wrong_gw}\nPY\n" + _start_sh(
    "python3 backend.py", "python3 gateway.py"
  )
  probe = rng.sample(sorted(store.items()), min(5, len(store)))
  return TaskSpec(
    instruction,
    GATEWAY_CHECK,
    solve,
    wrong,
    files={
      "backend.py": BACKEND.replace("BACKEND_PORT", str(bport)),
      "backend_data.json": json.dumps(store, indent=1),
    },
    data={
      "backend": bport,
      "gateway": gport,
      "probe": probe,
      "fresh": util.token(rng, 9),
      "fresh2": util.token(rng, 9),
      "put": level >= 1,
      "health": level >= 2,
    },
    language="python",
    complexity=("moderate", "complex", "complex")[level],
  )


INVENTORY = """
import json, socketserver, threading, http.server
STOCK, LOCK = {}, threading.Lock()
class T(socketserver.StreamRequestHandler):
  def handle(self):
    for line in self.rfile:
      w = line.decode().split()
      with LOCK:
        if len(w) == 3 and w[0] in ("ADD", "REMOVE") and w[2].isdigit():
          q = int(w[2]) * (1 if w[0] == "ADD" else -1)
          if STOCK.get(w[1], 0) + q < 0 and CHECK_NEG:
            out = "ERR insufficient"
          else:
            STOCK[w[1]] = STOCK.get(w[1], 0) + q; out = f"OK {STOCK[w[1]]}"
        elif len(w) == 2 and w[0] == "QTY":
          out = f"QTY {STOCK.get(w[1], 0)}"
        else:
          out = "ERR syntax"
      self.wfile.write((out + "\\n").encode())
class H(http.server.BaseHTTPRequestHandler):
  def do_GET(self):
    with LOCK:
      body = json.dumps(dict(sorted((k, v) for k, v in STOCK.items() if v > 0)))
    self.send_response(200 if self.path == "/inventory" else 404); self.end_headers(); self.wfile.write(body.encode())
  def log_message(self, *a):
    pass
socketserver.ThreadingTCPServer.allow_reuse_address = True
if HTTP_PORT:
  threading.Thread(target=http.server.ThreadingHTTPServer(("127.0.0.1", HTTP_PORT), H).serve_forever, daemon=True).start()
socketserver.ThreadingTCPServer(("127.0.0.1", TCP_PORT), T).serve_forever()
"""  # noqa: E501 (embedded script, kept verbatim)

INVENTORY_CHECK = """
import random
ensure_services([p for p in (DATA["tcp"], DATA["http"]) if p])
rng = random.Random(DATA["seed"])
stock = {}
for i in range(DATA["n"]):
  item = rng.choice(DATA["items"])
  op = rng.choice(("ADD", "REMOVE", "QTY", "BOGUS"))
  q = rng.randint(1, 9)
  if op == "ADD":
    stock[item] = stock.get(item, 0) + q; want = f"OK {stock[item]}"; cmd = f"ADD {item} {q}"
  elif op == "REMOVE":
    cmd = f"REMOVE {item} {q}"
    if stock.get(item, 0) < q:
      want = "ERR insufficient"
    else:
      stock[item] -= q; want = f"OK {stock[item]}"
  elif op == "QTY":
    cmd, want = f"QTY {item}", f"QTY {stock.get(item, 0)}"
  else:
    cmd, want = f"BOGUS {item}", "ERR syntax"
  got = tcp(DATA["tcp"], cmd + "\\n")
  if got != want:
    fail(f"command {i} {cmd!r}: got {got!r}, expected {want!r}")
if DATA["http"]:
  code, body = http("GET", DATA["http"], "/inventory")
  want = {k: v for k, v in sorted(stock.items()) if v > 0}
  try:
    got = json.loads(body)
  except ValueError:
    fail(f"/inventory is not JSON: {body[:80]!r}")
  if code != 200 or got != want:
    fail(f"/inventory = {code} {got}, expected {want}")
"""


def inventory_service(rng: random.Random, level: int) -> TaskSpec:
  tcp_port, http_port = _ports(rng, 2)
  http_port = http_port if level >= 1 else 0
  items = sorted({util.word(rng) for _ in range((3, 6, 12)[level])})
  spec = [
    f"raw TCP on 127.0.0.1:{tcp_port}, one command per line, one reply line each; the state is "
    "shared by all connections and starts empty:",
    "  `ADD <item> <n>` -> `OK <new quantity>`",
    "  `REMOVE <item> <n>` -> `OK <new quantity>`, or `ERR insufficient` (state unchanged) when "
    "fewer than n are in stock",
    "  `QTY <item>` -> `QTY <quantity>` (0 for unknown items)",
    "  anything else -> `ERR syntax`",
  ]
  if http_port:
    spec.append(
      f"HTTP on 127.0.0.1:{http_port}: `GET /inventory` -> 200, JSON object item -> quantity for "
      "quantities > 0"
    )
  instruction = (
    "Write an inventory service:\n"
    + "".join(f"- {s}\n" if not s.startswith("  ") else s + "\n" for s in spec)
    + START_NOTE
  )
  srv = INVENTORY.replace("TCP_PORT", str(tcp_port)).replace("HTTP_PORT", str(http_port))
  solve = f"cat > inventory.py <<'PY'\n{srv.replace('CHECK_NEG', 'True')}\nPY\n" + _start_sh(
    "python3 inventory.py"
  )
  wrong = f"cat > inventory.py <<'PY'\n{srv.replace('CHECK_NEG', 'False')}\nPY\n" + _start_sh(
    "python3 inventory.py"
  )
  return TaskSpec(
    instruction,
    INVENTORY_CHECK,
    solve,
    wrong,
    data={
      "tcp": tcp_port,
      "http": http_port,
      "items": items,
      "seed": rng.randint(0, 2**31),
      "n": (30, 150, 500)[level],
    },
    language="python",
    complexity="moderate",
  )


FAMILIES = (
  Family("kv_service", "data_querying", "multi_protocol", "text_only", kv_service, ("http", "tcp")),
  Family(
    "backend_gateway",
    "system_administration",
    "multi_protocol",
    "multi_service_compose",
    gateway,
    ("http", "tcp"),
  ),
  Family(
    "inventory_service",
    "software_engineering",
    "multi_protocol",
    "text_only",
    inventory_service,
    ("tcp", "http"),
  ),
)
