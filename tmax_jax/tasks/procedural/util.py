"""Small deterministic generators shared by the families (words, names, tables)."""

from __future__ import annotations

import gzip
import io
import random
import tarfile
import zipfile

WORDS = (
  "amber",
  "birch",
  "cobalt",
  "delta",
  "ember",
  "falcon",
  "garnet",
  "harbor",
  "indigo",
  "juniper",
  "kestrel",
  "lumen",
  "marble",
  "nectar",
  "onyx",
  "pepper",
  "quartz",
  "raven",
  "sierra",
  "tundra",
  "umber",
  "violet",
  "willow",
  "xenon",
  "yarrow",
  "zephyr",
  "alpine",
  "basil",
  "cedar",
  "dune",
  "fjord",
  "glacier",
  "hazel",
  "iris",
  "jasper",
  "kelp",
  "lotus",
  "maple",
  "nova",
  "orchid",
)
FIRST = (
  "ana",
  "ben",
  "carla",
  "dev",
  "elif",
  "femi",
  "gita",
  "hugo",
  "ines",
  "jon",
  "kai",
  "lena",
  "mika",
  "nils",
  "omar",
  "pia",
  "quinn",
  "rosa",
  "sam",
  "tara",
  "uma",
  "vic",
  "wen",
  "yara",
)
REGIONS = ("north", "south", "east", "west", "central")
PRODUCTS = ("widget", "gadget", "sprocket", "gizmo", "doohickey", "bracket", "flange", "valve")


def word(rng: random.Random) -> str:
  return rng.choice(WORDS)


def ident(rng: random.Random, n: int = 2) -> str:
  return "_".join(rng.choice(WORDS) for _ in range(n))


def token(
  rng: random.Random, n: int = 12, alphabet: str = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
) -> str:
  return "".join(rng.choice(alphabet) for _ in range(n))


def text_blob(rng: random.Random, n_words: int) -> str:
  return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "\n"


def pick(rng: random.Random, level: int, values):
  """The value for difficulty `level` (0..2) from a 3-tuple."""
  return values[level]


def tar_bytes(files: dict[str, bytes], mode: str = "w:gz") -> bytes:
  """A deterministic tarball (fixed mtimes, owners, order)."""
  buf = io.BytesIO()
  if mode == "w:gz":  # gzip header carries a timestamp; write the tar then gzip with mtime 0
    raw = tar_bytes(files, "w")
    return gzip.compress(raw, mtime=0)
  with tarfile.open(fileobj=buf, mode=mode) as tf:
    for name in sorted(files):
      info = tarfile.TarInfo(name)
      info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
      tf.addfile(info, io.BytesIO(files[name]))
  return buf.getvalue()


def zip_bytes(files: dict[str, bytes]) -> bytes:
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
    for name in sorted(files):
      zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), files[name])
  return buf.getvalue()


def csv_line(fields) -> str:
  out = []
  for f in fields:
    s = str(f)
    if any(c in s for c in ',"\n'):
      s = '"' + s.replace('"', '""') + '"'
    out.append(s)
  return ",".join(out)
