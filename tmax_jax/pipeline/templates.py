"""Fixed task templates of the scripted writer (scripted.py): one per verifier kind, each with a
solution and a near miss for the scripted policy, the fixture kinds synthesised at build time
as fixtures.RECIPES describes, and variants that fail a given pipeline stage.

Variants: ok; malformed (not JSON: the writer's retry path); build_fail (a RUN step exits 3);
smoke_fail (the smoke test fails); oracle_fail (the solution does nothing); noop_pass (the
expected outputs are seeded, so doing nothing passes). Every template knows its knob's
near-miss direction: the near miss passes at the written knob setting and fails once the knob
moves harder, so a policy mixing both moves a task out of "always solved".
"""

from __future__ import annotations

import json

from tmax_jax.tasks.generator.fixtures import FONT

VARIANTS = ("ok", "malformed", "build_fail", "smoke_fail", "oracle_fail", "noop_pass")
IMAGE_TEXT = "CODE 4821"
BINARY_SECRET = "tmax-secret-7731"

SALES = "region,amount\nwest,10\neast,5\nwest,7\nnorth,1\neast,2\n"
READINGS = [("r1", 12), ("r2", 75), ("r3", 50), ("r4", 51), ("r5", 3)]
READINGS += [("r6", 88), ("r7", 49), ("r8", 64), ("r9", 20), ("r10", 99)]
FILTER = r"""import re, sys
data = sys.stdin.read()
bad = re.compile(r"('\s*or\s)|(drop\s+table)|(union\s+select)", re.I)
sys.exit(1 if bad.search(data) else 0)
"""
REV = """import sys
for line in sys.stdin.read().splitlines():
    print(" ".join(line.split(" ")[::-1]))
"""
SERVER = """import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"no")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()
"""


def _heredoc(path: str, text: str) -> str:
  return f"cat > {path} <<'TMAX_EOF'\n{text}TMAX_EOF\n"


def _labels(strict_above: bool) -> str:
  op = ">" if strict_above else ">="
  return f'awk -F, \'NR>1{{print ($2{op}50)?"high":"low"}}\' readings.csv > labels.txt\n'


# kind -> marker (in the instruction), instruction, seeds, verifier params, solution, near miss,
# the files the solution writes (seeded by noop_pass)
TEMPLATES = {
  "exact_text": dict(
    marker="sales.csv",
    instruction=(
      "An analyst left `sales.csv` (columns region,amount) in /workspace. Write the total "
      "amount per region to `/workspace/totals.txt`, one `region total` line per region, sorted "
      "by region name."
    ),
    seeds={"sales.csv": SALES},
    params={
      "targets": [{"path": "totals.txt", "expected": "east 7\nnorth 1\nwest 17\n"}],
      "strictness": 0,
    },
    solution="tail -n +2 sales.csv | awk -F, '{s[$1]+=$2} END {for (r in s) print r, s[r]}' "
    "| sort > totals.txt\n",
    near_miss="tail -n +2 sales.csv | awk -F, '{s[$1]+=$2} END {for (r in s) print r, s[r] \"  \"}'"
    " | sort > totals.txt\n",
    outputs={"totals.txt": "east 7\nnorth 1\nwest 17\n"},
  ),
  "metric_threshold": dict(
    marker="readings.csv",
    instruction=(
      "Label each reading of `readings.csv` (columns id,value) `high` when its value is above 50 "
      "and `low` otherwise, one label per line in input order, in `/workspace/labels.txt`. At "
      "least a fraction {{threshold}} of the labels must be right."
    ),
    seeds={"readings.csv": "id,value\n" + "".join(f"{i},{v}\n" for i, v in READINGS)},
    params={
      "metric": "accuracy",
      "threshold": 0.8,
      "predictions": "labels.txt",
      "reference": ["high" if v > 50 else "low" for _, v in READINGS],
    },
    solution=_labels(True),
    near_miss=_labels(False),  # 50 counts as high: 9 of 10 right
    outputs={"labels.txt": "".join(("high" if v > 50 else "low") + "\n" for _, v in READINGS)},
  ),
  "adversarial_corpus": dict(
    marker="filter.py",
    instruction=(
      "Write `/workspace/filter.py`: it reads one request body on stdin and exits 0 to accept it "
      "or 1 to reject it. Reject SQL injection attempts (quote-OR tautologies, DROP TABLE, UNION "
      "SELECT) and accept ordinary text."
    ),
    seeds={"README.txt": "filter.py is missing.\n"},
    params={
      "command": "python3 /workspace/filter.py",
      "benign": ["hello world", "order 66 shipped", "drop me a line", "union station at noon"],
      "malicious": [
        "' OR 1=1 --",
        "1; DROP TABLE users",
        "x UNION SELECT pw FROM users",
        "admin' or '1'='1",
      ],
      "sample": 2,
      "seed": 3,
    },
    solution=_heredoc("filter.py", FILTER),
    near_miss=_heredoc("filter.py", FILTER.replace(r"|(union\s+select)", "")),
    outputs={"filter.py": FILTER},
  ),
  "fuzz_equivalence": dict(
    marker="rev.py",
    instruction=(
      "Write `/workspace/rev.py`: it reads text on stdin and prints every line with the order of "
      "its space-separated words reversed (a run of spaces separates empty words, which keep "
      "their place)."
    ),
    seeds={"README.txt": "rev.py is missing.\n"},
    params={
      "command": "python3 /workspace/rev.py",
      "generator": {"type": "text", "alphabet": "ab ", "max_len": 8},
      "n": 1,
      "seed": 1,
      "reference_code": "def reference(data):\n  return ''.join(' '.join(l.split(' ')[::-1]) + "
      "'\\n' for l in data.splitlines())\n",
    },
    solution=_heredoc("rev.py", REV),
    near_miss=_heredoc("rev.py", REV.replace('line.split(" ")', "line.split()")),
    outputs={"rev.py": REV},
  ),
  "multi_protocol": dict(
    marker="server.py",
    instruction=(
      "Write `/workspace/server.py`, an HTTP server on 127.0.0.1 port 8080 that answers "
      "`GET /health` with status 200 and the body `ok`, and every other path with 404."
    ),
    seeds={"README.txt": "server.py is missing.\n"},
    params={
      "probes": [
        {"protocol": "http", "port": 8080, "path": "/health", "expect_body": "ok"},
        {"protocol": "http", "port": 8080, "path": "/nope", "expect_status": 404},
      ],
      "start_command": "python3 /workspace/server.py",
      "startup_timeout_s": 3,
    },
    solution=_heredoc("server.py", SERVER),
    near_miss=_heredoc("server.py", SERVER.replace("200 if ok else 404", "200")),
    outputs={"server.py": SERVER},
  ),
}

MAKE_IMAGE = f"""import sys
from PIL import Image, ImageDraw, ImageFont
img = Image.new("L", (900, 240), 255)
ImageDraw.Draw(img).text((40, 70), "{IMAGE_TEXT}", font=ImageFont.truetype("{FONT}", 90), fill=0)
img.save(sys.argv[1])
"""
SECRET_C = f'#include <stdio.h>\nint main(void) {{ puts("{BINARY_SECRET}"); return 0; }}\n'
COMPOSE = """services:
  main:
    build: .
  cache:
    build: .
    command: python3 -m http.server 9000
"""
VENDORED = {
  "vendor/tinylib/pyproject.toml": '[project]\nname = "tinylib"\nversion = "0.1.0"\n',
  "vendor/tinylib/tinylib/__init__.py": "def answer():\n  return 42\n",
}
_RUN = "FROM tmax-base:bookworm\nRUN mkdir -p /workspace\n"
# fixture -> (Dockerfile or None, build files, extra seeds), per fixtures.RECIPES
FIXTURE_BUILDS = {
  "text_only": (None, {}, {}),
  "image": (
    _RUN + "COPY make_image.py /tmp/make_image.py\n"
    "RUN python3 /tmp/make_image.py /workspace/note.png && rm /tmp/make_image.py\n",
    {"make_image.py": MAKE_IMAGE},
    {},
  ),
  "audio": (
    _RUN + "RUN ffmpeg -loglevel error -f lavfi -i sine=frequency=440:duration=2 -ac 1 "
    "/workspace/tone.wav\n",
    {},
    {},
  ),
  "video": (
    _RUN + "RUN ffmpeg -loglevel error -f lavfi -i color=c=red:s=160x120:d=1 -c:v mpeg4 "
    "/workspace/clip.mp4\n",
    {},
    {},
  ),
  "stripped_binary": (
    _RUN + "COPY secret.c /tmp/secret.c\n"
    "RUN gcc -O2 -s -o /workspace/secret /tmp/secret.c && rm /tmp/secret.c\n",
    {"secret.c": SECRET_C},
    {},
  ),
  "vendored_package": (None, {}, VENDORED),
  "multi_service_compose": (_RUN, {"docker-compose.yaml": COMPOSE}, {}),
}


def task_reply(verifier: str, fixture: str, variant: str = "ok", build_tag: str = "") -> str:
  """The writer's reply for the sampled verifier kind and fixture (a JSON object). `build_tag`
  adds a RUN step writing it, so the task's image has a layer of its own (a real writer's
  Dockerfiles differ per task; the templates' would otherwise all hit the layer cache)."""
  if variant not in VARIANTS:
    raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
  if variant == "malformed":
    return 'Sure! Here is the task: {"name": "broken", '
  t = TEMPLATES[verifier]
  dockerfile, files, seeds = FIXTURE_BUILDS[fixture]
  seeds = {**t["seeds"], **seeds}
  if variant == "noop_pass":
    seeds.update(t["outputs"])
  if variant == "build_fail":
    dockerfile = "FROM tmax-base:bookworm\nRUN echo building && exit 3\n"
  if build_tag:
    dockerfile = (dockerfile or _RUN) + f"RUN echo {build_tag} > /opt/tmax-build-tag\n"
  environment = {"seeds": seeds, "files": files}
  if dockerfile:
    environment["dockerfile"] = dockerfile
  obj = {
    "name": verifier.replace("_", "-") + "-task",
    "instruction": t["instruction"],
    "difficulty": "medium",
    "environment": environment,
    "solution": "#!/bin/bash\ncd /workspace\n"
    + ("true\n" if variant == "oracle_fail" else t["solution"]),
    "verifier": {"kind": verifier, "params": t["params"]},
    "smoke_test": "test -f /workspace/does-not-exist"
    if variant == "smoke_fail"
    else "test -d /workspace",
  }
  return json.dumps(obj)


def policy_script(instruction: str, good: bool) -> str:
  """The scripted policy's commands for a templated task: its solution or its near miss."""
  for t in TEMPLATES.values():
    if t["marker"] in instruction:
      return "cd /workspace\n" + (t["solution"] if good else t["near_miss"])
  return "echo 'no idea'"
