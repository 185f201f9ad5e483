"""vendored_package families: fix or extend a small Python package vendored into the project."""

from __future__ import annotations

import hashlib
import random

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

SLUG_REF = r"""
import re, unicodedata
def slugify(text, max_len=40):
  s = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
  s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
  if len(s) > max_len:
    cut = s.rfind("-", 0, max_len + 1)
    s = s[:cut] if cut > 0 else s[:max_len]
  return s.strip("-")
"""

SLUG_TEXT = '''"""Text helpers for slugkit."""
import re
import unicodedata


def normalize(text):
  """Lower-cases and transliterates to ASCII (accents are decomposed and dropped: e-acute -> e)."""
  return NORMALIZE


def dashes(s):
  """Replaces every run of characters outside [a-z0-9] with ONE dash and strips dashes at both ends."""
  return DASHES


def truncate(s, max_len):
  """Cuts s to at most max_len characters at the last dash (word boundary) that keeps it within
  max_len; without such a dash, cuts hard at max_len. Never leaves a trailing dash."""
  if len(s) <= max_len:
    return s
  TRUNCATE
'''  # noqa: E501 (embedded script, kept verbatim)

SLUG_CORE = '''"""slugkit.slugify: URL slugs."""
from .text import dashes, normalize, truncate


def slugify(text, max_len=40):
  """normalize -> dashes -> truncate."""
  return truncate(dashes(normalize(text)), max_len)
'''

SLUG_APP = '''"""Prints one URL per title in titles.txt (do not change this file)."""
import sys
sys.path.insert(0, "/workspace/vendor")
from slugkit import slugify
for line in open("/workspace/titles.txt", encoding="utf-8"):
  if line.strip():
    print("https://blog.example.org/" + slugify(line.strip()))
'''

SLUG_CHECK = """
import hashlib, random, sys
if hashlib.sha256(open("/workspace/app.py", "rb").read()).hexdigest() != DATA["app_sha"]:
  fail("app.py was modified; fix the vendored package instead")
ref = {}
exec(DATA["ref"], ref)
sys.path.insert(0, "/workspace/vendor")
try:
  from slugkit import slugify
except Exception as e:
  fail(f"slugkit does not import: {e}")
rng = random.Random(DATA["seed"])
alphabet = "abcdefghij XYZ-_,.!?'   0123456789éèüñçÅ"
for _ in range(DATA["n"]):
  t = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
  m = rng.randint(5, 40)
  try:
    got = slugify(t, m)
  except Exception as e:
    fail(f"slugify({t!r}, {m}) raised {e!r}")
  if got != ref["slugify"](t, m):
    fail(f"slugify({t!r}, {m}) = {got!r}, expected {ref['slugify'](t, m)!r}")
"""


def vendored_slug(rng: random.Random, level: int) -> TaskSpec:
  good = {
    "NORMALIZE": 'unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()',
    "DASHES": 're.sub(r"[^a-z0-9]+", "-", s).strip("-")',
    "TRUNCATE": 'cut = s.rfind("-", 0, max_len + 1)\n  return (s[:cut] if cut > 0 else '
    's[:max_len]).strip("-")',
  }
  bad = {
    "DASHES": 're.sub(r"[^a-z0-9]", "-", s).strip("-")',
    "TRUNCATE": "return s[:max_len]",
    "NORMALIZE": 'text.encode("ascii", "ignore").decode().lower()',
  }
  broken = ["DASHES", "TRUNCATE", "NORMALIZE"][: level + 1]
  text = SLUG_TEXT
  for k, v in good.items():
    text = text.replace(k, bad[k] if k in broken else v)
  titles = [
    f"{util.word(rng).title()},  {util.word(rng)} & {util.word(rng)}: Café Notes {i}!"
    for i in range(6)
  ]
  files = {
    "vendor/slugkit/__init__.py": '"""slugkit 0.3 (vendored)."""\nfrom .core import slugify\n',
    "vendor/slugkit/core.py": SLUG_CORE,
    "vendor/slugkit/text.py": text,
    "app.py": SLUG_APP,
    "titles.txt": "\n".join(titles) + "\n",
  }
  instruction = """`python3 /workspace/app.py` prints blog URLs, but some slugs are wrong (repeated
dashes, and worse). The slug library is vendored in /workspace/vendor/slugkit and its docstrings
describe the intended behaviour. Fix the vendored library so slugify behaves as documented for any
input (app.py must stay unchanged)."""
  fix = "python3 - <<'PY'\np = 'vendor/slugkit/text.py'\ns = open(p).read()\n"
  for k in broken:
    old = bad[k] if k != "TRUNCATE" else "return s[:max_len]"
    fix += f"s = s.replace({old!r}, {good[k]!r})\n"
  fix += "open(p, 'w').write(s)\nPY"
  wrong = (
    "python3 - <<'PY'\np = 'vendor/slugkit/text.py'\ns = open(p).read()\n"
    + f"s = s.replace({bad['DASHES']!r}, {good['DASHES']!r})\nopen(p, 'w').write(s)\nPY"
  )
  if level == 0:  # the one real bug fixed naively: collapse only double dashes
    wrong = wrong.replace(
      repr(good["DASHES"]), repr('re.sub(r"[^a-z0-9]", "-", s).replace("--", "-").strip("-")')
    )
  return TaskSpec(
    instruction,
    SLUG_CHECK,
    fix,
    wrong,
    files=files,
    data={
      "ref": SLUG_REF,
      "seed": rng.randint(0, 2**31),
      "n": (200, 800, 3000)[level],
      "app_sha": hashlib.sha256(SLUG_APP.encode()).hexdigest(),
    },
    language="python",
    complexity=("short", "moderate", "moderate")[level],
  )


UNITS_PKG = '''"""unitconv 1.1 (vendored): convert(value, src, dst) between units of the same dimension."""

LENGTH_M = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "in": 0.0254, "ft": 0.3048}


def convert(value, src, dst):
  if src in LENGTH_M and dst in LENGTH_M:
    return value * LENGTH_M[src] / LENGTH_M[dst]
  raise ValueError(f"cannot convert {src} to {dst}")
'''  # noqa: E501 (embedded script, kept verbatim)

UNITS_REF = """
LENGTH_M = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "in": 0.0254, "ft": 0.3048,
            "yd": 0.9144, "mi": 1609.344, "nmi": 1852.0}
def to_k(v, u):
  return {"K": v, "C": v + 273.15, "F": (v - 32) * 5 / 9 + 273.15}[u]
def from_k(v, u):
  return {"K": v, "C": v - 273.15, "F": (v - 273.15) * 9 / 5 + 32}[u]
def convert(value, src, dst):
  if src in LENGTH_M and dst in LENGTH_M:
    return value * LENGTH_M[src] / LENGTH_M[dst]
  if TEMPS and src in "CFK" and dst in "CFK" and len(src) == len(dst) == 1:
    return from_k(to_k(value, src), dst)
  raise ValueError(f"cannot convert {src} to {dst}")
def parse(text):
  v, u = text.split()
  return float(v), u
"""

UNITS_CHECK = """
import math, random, sys
ref = {}
exec(DATA["ref"].replace("TEMPS", str(DATA["temps"])), ref)
sys.path.insert(0, "/workspace/vendor")
try:
  import unitconv
except Exception as e:
  fail(f"unitconv does not import: {e}")
rng = random.Random(DATA["seed"])
units = DATA["units"]
for _ in range(DATA["n"]):
  a, b = rng.choice(units), rng.choice(units)
  v = rng.choice((0.0, 1.0, -40.0, round(rng.uniform(-500, 500), 3)))
  try:
    want = ref["convert"](v, a, b)
  except ValueError:
    want = None
  try:
    got = unitconv.convert(v, a, b)
  except ValueError:
    got = None
  except Exception as e:
    fail(f"convert({v}, {a!r}, {b!r}) raised {e!r}")
  if (got is None) != (want is None) or (want is not None and not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)):
    fail(f"convert({v}, {a!r}, {b!r}) = {got}, expected {want}")
if DATA["parse"]:
  for text, want in (("3.5 km", (3.5, "km")), ("-40 F", (-40.0, "F")), ("12 nmi", (12.0, "nmi"))):
    try:
      got = unitconv.parse_quantity(text)
    except Exception as e:
      fail(f"parse_quantity({text!r}) raised {e!r}")
    if tuple(got) != want:
      fail(f"parse_quantity({text!r}) = {got!r}, expected {want!r}")
"""  # noqa: E501 (embedded script, kept verbatim)


def vendored_units(rng: random.Random, level: int) -> TaskSpec:
  temps, parse = level >= 1, level >= 2
  req = [
    "add the length units `yd` (yard, 0.9144 m), `mi` (statute mile, 1609.344 m) and `nmi` "
    "(nautical mile, 1852 m)"
  ]
  if temps:
    req.append(
      "add temperatures `C`, `F`, `K` (convertible among themselves, exact affine formulas; "
      "converting between a length and a temperature raises ValueError)"
    )
  if parse:
    req.append(
      "add `parse_quantity(text) -> (float, unit)` for strings like `3.5 km` (number, one space, "
      "unit)"
    )
  instruction = (
    "Our code uses the vendored package /workspace/vendor/unitconv (import it with "
    "/workspace/vendor on sys.path). Extend it, keeping its API:\n"
    + "".join(f"- {r}\n" for r in req)
    + "Unknown units or mixed dimensions must raise ValueError."
  )
  ref_impl = UNITS_REF.replace("TEMPS", str(temps)).replace(
    "def parse(text):", "def parse_quantity(text):"
  )
  solve = (
    f'cat > vendor/unitconv/__init__.py <<\'PY\'\n"""unitconv 1.2 (vendored)."""\n{ref_impl}\nPY'
  )
  wrong = solve.replace('"nmi": 1852.0', '"nmi": 1.852').replace(
    "(v - 32) * 5 / 9 + 273.15", "v * 5 / 9 + 273.15"
  )
  units = ["m", "km", "cm", "in", "ft", "yd", "mi", "nmi"] + (["C", "F", "K"] if temps else [])
  return TaskSpec(
    instruction,
    UNITS_CHECK,
    solve,
    wrong,
    files={"vendor/unitconv/__init__.py": UNITS_PKG},
    data={
      "ref": UNITS_REF,
      "temps": temps,
      "parse": parse,
      "units": units,
      "seed": rng.randint(0, 2**31),
      "n": (200, 600, 2000)[level],
    },
    language="python",
  )


FAMILIES = (
  Family(
    "vendored_slug_fix",
    "debugging",
    "fuzz_equivalence",
    "vendored_package",
    vendored_slug,
    ("python",),
  ),
  Family(
    "vendored_units_extend",
    "software_engineering",
    "fuzz_equivalence",
    "vendored_package",
    vendored_units,
    ("python", "api design"),
  ),
)
