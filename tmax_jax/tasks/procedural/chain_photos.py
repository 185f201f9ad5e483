"""photo_sync chain (file_operations): one-way import -> second sync -> deletions and restores.

  photo_import   copy camera/DCIM photos into library/YYYY/MM/, write library/manifest.tsv
  resync         second sync after independent edits: new camera photos (some byte-identical to
                 photos already in the library), photos the user added to the library directly
                 (adopt them), .xmp sidecars (never photos); uses the parent's manifest
  trash_restore  the user trashed photos and deleted some from the camera: restore the listed
                 ones, never re-import a trashed photo, import what is new, list the bin
  albums         (branch after photo_import) albums.txt -> relative symlinks into the library

Invariants every generation's check relies on, which later generations keep: camera photos are
only added or deleted by the environment, never changed; a library photo never changes its bytes;
the user's recycle bin library/.trash/<path> counts as "in the library"; manifest.tsv only grows
and stays sorted; duplicates.tsv only grows.
"""

from __future__ import annotations

import datetime
import hashlib
import random
from collections.abc import Sequence

from tmax_jax.tasks.procedural.chains import STEP_MARK, ChainFamily, Extension
from tmax_jax.tasks.procedural.core import Family, TaskSpec

CHECK_COMMON = """
import hashlib


def sha(path):
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


def locate(rel):
  for p in ("library/" + rel, "library/.trash/" + rel):
    if os.path.isfile(p):
      return p
  fail(f"library/{rel} is missing (and it is not in library/.trash either)")


def manifest():
  rows, paths = {}, []
  for no, line in enumerate(read("library/manifest.tsv").splitlines(), 1):
    parts = line.split("\\t")
    if len(parts) < 2 or len(parts[0]) != 64:
      fail(f"library/manifest.tsv line {no}: expected <sha256> TAB <path>, got {line[:80]!r}")
    if parts[1] in rows:
      fail(f"library/manifest.tsv lists {parts[1]} twice")
    rows[parts[1]] = parts[0]
    paths.append(parts[1])
  if paths != sorted(paths):
    fail("library/manifest.tsv is not sorted by path")
  return rows


def expect_photo(rel, digest, rows, where="library"):
  if sha(locate(rel)) != digest:
    fail(f"{where}/{rel} does not hold the photo's original bytes")
  if rows.get(rel) != digest:
    fail(f"library/manifest.tsv has no line '{digest}<TAB>{rel}'")
"""

IMPORT_CHECK = (
  CHECK_COMMON
  + """
rows = manifest()
for name, rel, digest in DATA["photos"]:
  cam = "camera/DCIM/" + name
  if os.path.isfile(cam) and sha(cam) != digest:
    fail(f"{cam} was modified: the import is one-way")
  expect_photo(rel, digest, rows)
for rel in DATA["not_photos"]:
  if os.path.exists("library/" + rel) or rel in rows:
    fail(f"library/{rel} was imported, but it is not a photo")
"""
)

# The manifest/library helpers every oracle of the chain shares (python, run from /workspace).
ORACLE_LIB = """import hashlib, os, re, shutil
PHOTO = re.compile(r"^IMG_(\\d{4})(\\d{2})(\\d{2})_\\d{4}\\.jpg$", re.I)
def sha(p):
  return hashlib.sha256(open(p, "rb").read()).hexdigest()
def load_manifest():
  rows = {}
  if os.path.isfile("library/manifest.tsv"):
    for line in open("library/manifest.tsv"):
      h, rel = line.rstrip("\\n").split("\\t")[:2]
      rows[rel] = h
  return rows
def save_manifest(rows):
  with open("library/manifest.tsv", "w") as f:
    f.writelines(f"{rows[r]}\\t{r}\\n" for r in sorted(rows))
def camera_photos():
  for name in sorted(os.listdir("camera/DCIM")):
    m = PHOTO.match(name)
    if m and os.path.isfile("camera/DCIM/" + name):
      yield name, f"{m[1]}/{m[2]}/{name}"
"""


def _oracle(body: str) -> str:
  return "python3 - <<'PY'\n" + ORACLE_LIB + body.strip("\n") + "\nPY"


def _steps(explore: str, work: str, verify: str) -> str:
  """An oracle in three tool calls for scripted teachers (chains.STEP_MARK)."""
  return f"{explore}\n{STEP_MARK}\n{work}\n{STEP_MARK}\n{verify}"


def _digest(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _jpeg(rng: random.Random, small: bool = False) -> bytes:
  size = rng.randint(40, 60) if small else rng.randint(300, 700)
  return b"\xff\xd8\xff\xe0" + rng.randbytes(size) + b"\xff\xd9"


def _date(rng: random.Random, start: datetime.date, days: int) -> datetime.date:
  return start + datetime.timedelta(days=rng.randrange(days))


def _name(date: datetime.date, counter: int, upper: bool = False) -> str:
  return f"IMG_{date:%Y%m%d}_{counter:04d}." + ("JPG" if upper else "jpg")


def _rel(name: str) -> str:
  return f"{name[4:8]}/{name[8:10]}/{name}"


def _shoot(rng, n, start, days, counter, level):
  """n new photos -> (files {camera path: bytes}, [[name, rel, sha]], next counter)."""
  files, photos = {}, []
  for _ in range(n):
    counter += rng.randint(1, 3)
    name = _name(_date(rng, start, days), counter, upper=level == 2 and rng.random() < 0.3)
    data = _jpeg(rng)
    files[f"camera/DCIM/{name}"] = data
    photos.append([name, _rel(name), _digest(data)])
  return files, photos, counter


def photo_import(rng: random.Random, level: int) -> TaskSpec:
  n = (6, 14, 30)[level]
  start = datetime.date(2021, 1, 1)
  files, photos, counter = _shoot(rng, n, start, 900, rng.randint(1, 400), level)
  not_photos = []
  if level >= 1:  # decoys: camera thumbnails with real names, a video, a notes file
    for name, _, _ in rng.sample(photos, 2):
      files[f"camera/DCIM/.thumbnails/{name}"] = _jpeg(rng, small=True)
    video = _name(_date(rng, datetime.date(2022, 1, 1), 300), counter + 1).replace(".jpg", ".mov")
    files[f"camera/DCIM/{video}"] = rng.randbytes(200)
    files["camera/DCIM/NOTES.TXT"] = b"card notes\n"
    not_photos += [_rel(video), "NOTES.TXT"]
  instruction = """You maintain a family's photo library. The camera's memory card is mounted at
/workspace/camera; never modify, move or delete anything under it (the import is one-way).

Import every photo into /workspace/library:
- a photo is a regular file directly in camera/DCIM whose name is IMG_<YYYYMMDD>_<NNNN>.jpg (the
  extension in any letter case); anything else there is not a photo;
- copy it byte for byte to library/<YYYY>/<MM>/<name>, the date taken from its name and the name
  unchanged;
- write library/manifest.tsv with one line per imported photo, `<sha256 hex of the photo><TAB>
  <its path relative to library/>`, sorted by path in byte order (LC_ALL=C).

Later syncs use manifest.tsv to know what has been imported, so keep it exact. library/.trash/ is
the library app's recycle bin: photos the user deletes go there under the same relative path."""
  solve = _steps(
    "ls -la camera/DCIM | head -40",
    _oracle("""
rows = {}
for name, rel in camera_photos():
  os.makedirs(os.path.dirname("library/" + rel), exist_ok=True)
  shutil.copyfile("camera/DCIM/" + name, "library/" + rel)
  rows[rel] = sha("library/" + rel)
save_manifest(rows)
"""),
    "wc -l library/manifest.tsv && head -3 library/manifest.tsv",
  )
  # Plausible wrong: dates from the file's modification time (the card's files were all copied
  # today), not from the name.
  wrong = _oracle("""
import time
rows = {}
for name, _ in camera_photos():
  t = time.localtime(os.path.getmtime("camera/DCIM/" + name))
  rel = time.strftime("%Y/%m/", t) + name
  os.makedirs(os.path.dirname("library/" + rel), exist_ok=True)
  shutil.copyfile("camera/DCIM/" + name, "library/" + rel)
  rows[rel] = sha("library/" + rel)
save_manifest(rows)
""")
  return TaskSpec(
    instruction,
    IMPORT_CHECK,
    solve,
    wrong,
    files=files,
    data={"photos": photos, "not_photos": not_photos, "counter": counter},
    complexity=("moderate", "moderate", "complex")[level],
    language="python",
  )


def _imported(specs: Sequence[TaskSpec]) -> list[list[str]]:
  """[[name, rel, sha]] of every photo the lineage imported or adopted so far."""
  out = []
  for s in specs:
    out += s.data.get("photos", []) + s.data.get("new", [])
    out += [["", rel, h] for rel, h in s.data.get("adopted", [])]
  return out


RESYNC_CHECK = (
  CHECK_COMMON
  + """
rows = manifest()
for name, rel, digest in DATA["new"]:
  expect_photo(rel, digest, rows)
for rel, digest in DATA["adopted"]:
  expect_photo(rel, digest, rows)
for rel in DATA["sidecars"]:
  if rel in rows:
    fail(f"library/manifest.tsv lists the sidecar {rel}, which is not a photo")
got = [l.split("\\t") for l in lines("library/duplicates.tsv")]
names = [g[0] for g in got]
if names != sorted(names):
  fail("library/duplicates.tsv is not sorted by camera name")
for name, existing in DATA["dups"]:
  if [name, existing] not in got:
    fail(f"library/duplicates.tsv has no line '{name}<TAB>{existing}'")
  rel = name[4:8] + "/" + name[8:10] + "/" + name
  if os.path.exists("library/" + rel) or rel in rows:
    fail(f"camera/DCIM/{name} duplicates library/{existing} but was imported again")
"""
)

SYNC_BODY = """
rows = load_manifest()
by_sha = {}
for rel in sorted(rows):
  by_sha.setdefault(rows[rel], rel)
for root, dirs, names in os.walk("library"):
  dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "albums")
  for n in sorted(names):
    rel = os.path.relpath(os.path.join(root, n), "library")
    if n.lower().endswith(".jpg") and rel not in rows:  # the user's own photos: adopt them
      rows[rel] = sha("library/" + rel)
      by_sha.setdefault(rows[rel], rel)
dups = []
for name, rel in camera_photos():
  if rel in rows:
    continue
  h = sha("camera/DCIM/" + name)
  if h in by_sha:
    dups.append((name, by_sha[h]))
    continue
  os.makedirs(os.path.dirname("library/" + rel), exist_ok=True)
  shutil.copyfile("camera/DCIM/" + name, "library/" + rel)
  rows[rel] = h
  by_sha[h] = rel
save_manifest(rows)
old = [l.rstrip("\\n").split("\\t") for l in open("library/duplicates.tsv")] if os.path.isfile(
    "library/duplicates.tsv") else []
merged = sorted({tuple(x) for x in old} | set(dups))
with open("library/duplicates.tsv", "w") as f:
  f.writelines(f"{a}\\t{b}\\n" for a, b in merged)
"""


def _new_card(rng, level, specs, n_new, start):
  """New camera photos + duplicates of photos the library has -> (files, new, dups, counter)."""
  counter = max(s.data.get("counter", 0) for s in specs)
  files, new, counter = _shoot(rng, n_new, start, 120, counter, level)
  dups = []
  for _, rel, digest in rng.sample(_imported(specs), (1, 2, 3)[level]):
    counter += 1
    name = _name(_date(rng, start, 120), counter)
    data = None
    for s in specs:  # the bytes of the existing photo, from whichever generation seeded it
      for blob in s.files.values():
        if _digest(blob if isinstance(blob, bytes) else blob.encode()) == digest:
          data = blob
    files[f"camera/DCIM/{name}"] = data
    dups.append([name, rel])
  return files, new, sorted(dups), counter


def resync(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  files, new, dups, counter = _new_card(
    rng, level, specs, (3, 6, 10)[level], datetime.date(2023, 6, 1)
  )
  adopted, sidecars = [], []
  for _ in range((1, 2, 4)[level]):
    d = _date(rng, datetime.date(2023, 1, 1), 150)
    rel = f"{d:%Y/%m}/PXL_{d:%Y%m%d}_{rng.randint(100000, 999999)}.jpg"
    data = _jpeg(rng)
    files[f"library/{rel}"] = data
    adopted.append([rel, _digest(data)])
  for _, rel, _ in rng.sample(specs[0].data["photos"], 2):
    files[f"library/{rel}.xmp"] = b"<x:xmpmeta><xmp:Rating>4</xmp:Rating></x:xmpmeta>\n"
    sidecars.append(rel + ".xmp")
  instruction = """The photo library in /workspace/library was filled by an earlier import from
the camera card at /workspace/camera (library/manifest.tsv lists every imported photo as
`<sha256><TAB><path under library/>`). Since then both sides changed independently: the card has
new photos, some of which are byte-identical copies of photos the library already has (re-exports
under new names), and the user put photos from their phone straight into the library folders and
rated some photos (the `.xmp` files next to them are rating sidecars, not photos).

Run the second sync:
- import each camera photo (same rules as before: IMG_<YYYYMMDD>_<NNNN>.jpg in camera/DCIM, any
  extension case, copied to library/<YYYY>/<MM>/<name>) that is not imported yet, unless its bytes
  equal a photo already in the library: then do not import it, and list it in
  library/duplicates.tsv as `<camera name><TAB><path of the library photo with those bytes>`,
  lines sorted by camera name (keep lines that are already there);
- adopt the photos the user added: every .jpg under library/ that is not in the manifest gets its
  manifest line (its path stays as it is; a camera photo with the same bytes is then a duplicate);
- keep manifest.tsv exact and sorted; never change, move or re-copy a photo that is already in the
  library, and never touch the camera card."""
  # Plausible wrong: run the first import again over the whole card (imports the re-exports,
  # rebuilds the manifest from the card and so drops the user's photos).
  wrong = specs[0].solve
  solve = _steps(
    "head -5 library/manifest.tsv; find library -type f -newer library/manifest.tsv "
    "| head -20; ls camera/DCIM | tail -20",
    _oracle(SYNC_BODY),
    "cat library/duplicates.tsv && wc -l library/manifest.tsv",
  )
  return TaskSpec(
    instruction,
    RESYNC_CHECK,
    solve,
    wrong,
    files=files,
    data={"new": new, "dups": dups, "adopted": adopted, "sidecars": sidecars, "counter": counter},
    complexity="complex",
    language="python",
  )


TRASH_CHECK = (
  CHECK_COMMON
  + """
rows = manifest()
for rel, digest in DATA["restored"]:
  if not os.path.isfile("library/" + rel) or sha("library/" + rel) != digest:
    fail(f"library/{rel} was not restored from the recycle bin")
  if os.path.exists("library/.trash/" + rel):
    fail(f"library/.trash/{rel} is still in the recycle bin after its restore")
for rel, digest in DATA["trashed"]:
  if os.path.exists("library/" + rel):
    fail(f"library/{rel} came back although the user deleted it (it must stay in the bin)")
  if not os.path.isfile("library/.trash/" + rel) or sha("library/.trash/" + rel) != digest:
    fail(f"library/.trash/{rel} is gone; the bin must keep it")
want = sorted(rel for rel, _ in DATA["trashed"])
if lines("library/trash.tsv") != want:
  fail(f"library/trash.tsv should list the {len(want)} photos left in the bin, sorted")
for name, rel, digest in DATA["new"]:
  expect_photo(rel, digest, rows)
for name, rel, digest in DATA["deleted_on_camera"]:
  if sha(locate(rel)) != digest:
    fail(f"library/{rel} must stay in the library after its deletion from the camera")
dup = {l.split("\\t")[0]: l.split("\\t")[1] for l in lines("library/duplicates.tsv")}
for name, existing in DATA["dups"]:
  if dup.get(name) != existing:
    fail(f"library/duplicates.tsv has no line '{name}<TAB>{existing}'")
"""
)


def trash_restore(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  imported = [p for p in _imported(specs)]
  camera = [p for p in specs[0].data["photos"] + specs[1].data.get("new", [])]
  trashed_all = rng.sample(imported, (3, 5, 8)[level])
  restored = trashed_all[: len(trashed_all) // 2 or 1]
  trashed = trashed_all[len(restored) :]
  deleted = rng.sample([p for p in camera if p not in trashed_all], (1, 2, 3)[level])
  files, new, dups, counter = _new_card(
    rng, level, specs, (2, 4, 6)[level], datetime.date(2024, 3, 1)
  )
  files["restore.txt"] = "".join(rel + "\n" for _, rel, _ in restored).encode()
  moves = [
    f"mkdir -p library/.trash/{rel.rsplit('/', 1)[0]} && mv library/{rel} library/.trash/{rel}"
    for _, rel, _ in trashed_all
  ]
  removes = [f"rm -f camera/DCIM/{name}" for name, _, _ in deleted]
  instruction = """Your photo library in /workspace/library is synced from the camera card at
/workspace/camera (library/manifest.tsv lists every photo the library has, camera imports and the
user's own; library/duplicates.tsv lists camera photos skipped as byte-identical duplicates).
Since the last sync the user deleted some photos in the library app, which moved them to the
recycle bin library/.trash/<same path>, and deleted some photos from the camera card to free space.
They now want back the photos listed (one path under library/ per line) in /workspace/restore.txt.

Run the third sync:
- restore every photo listed in restore.txt: move it from library/.trash/<path> back to
  library/<path>;
- the other photos in the bin stay there and must NOT come back, even though the card still has
  them: a photo the user deleted is never re-imported;
- photos deleted from the card stay in the library (the sync is one-way and never deletes);
- import the card's new photos as before (manifest lines, duplicates listed in duplicates.tsv);
- write library/trash.tsv: the paths (under library/) of the photos left in the bin, sorted.
Keep manifest.tsv exact and sorted (photos in the bin keep their manifest lines)."""
  solve = _steps(
    "cat restore.txt; find library/.trash -type f | head -20",
    _oracle(
      """
for rel in open("restore.txt").read().split():
  if os.path.isfile("library/.trash/" + rel):
    os.makedirs(os.path.dirname("library/" + rel), exist_ok=True)
    os.replace("library/.trash/" + rel, "library/" + rel)
"""
      + SYNC_BODY
      + """
left = []
for root, _, names in os.walk("library/.trash"):
  left += [os.path.relpath(os.path.join(root, n), "library/.trash") for n in names]
with open("library/trash.tsv", "w") as f:
  f.writelines(rel + "\\n" for rel in sorted(left))
"""
    ),
    "cat library/trash.tsv && test -s library/manifest.tsv",
  )
  # Plausible wrong: empty the whole bin back into the library, then sync.
  wrong = (
    "cp -a library/.trash/. library/ && rm -rf library/.trash && mkdir -p library/.trash\n"
    + _oracle(SYNC_BODY)
    + "\n: > library/trash.tsv"
  )
  return TaskSpec(
    instruction,
    TRASH_CHECK,
    solve,
    wrong,
    files=files,
    setup="\n".join(moves + removes),
    data={
      "restored": [[r, h] for _, r, h in restored],
      "trashed": [[r, h] for _, r, h in trashed],
      "new": new,
      "dups": dups,
      "deleted_on_camera": deleted,
      "counter": counter,
    },
    complexity="intricate",
    language="python",
  )


ALBUM_CHECK = (
  CHECK_COMMON
  + """
for album, members in DATA["albums"].items():
  d = "library/albums/" + album
  if not os.path.isdir(d):
    fail(f"{d} does not exist")
  got = sorted(os.listdir(d))
  if got != sorted(n for n, _, _ in members):
    fail(f"{d} holds {got[:6]}, expected {sorted(n for n, _, _ in members)[:6]}")
  for name, rel, digest in members:
    p = f"{d}/{name}"
    if not os.path.islink(p) or os.readlink(p).startswith("/"):
      fail(f"{p} must be a relative symlink")
    if os.path.realpath(p) != os.path.realpath("library/" + rel) or sha(p) != digest:
      fail(f"{p} does not point at library/{rel}")
MISSING = "library/albums/MISSING.txt"
missing = lines(MISSING) if os.path.exists(MISSING) else []
if missing != DATA["missing"]:
  fail(f"library/albums/MISSING.txt should list {DATA['missing']}, got {missing[:6]}")
"""
)


def albums(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  photos = specs[0].data["photos"]
  chosen, lines_out = {}, []
  for i in range((1, 2, 3)[level]):
    album = rng.choice(("summer", "birthday", "hiking", "garden", "school", "trip")) + f"_{i}"
    members = sorted(rng.sample(photos, min(len(photos), (3, 4, 6)[level])))
    chosen[album] = members
    lines_out.append(f"{album}: " + " ".join(n for n, _, _ in members))
  missing = []
  if level >= 1:  # names that were never imported (not on the card any more)
    missing = sorted(_name(datetime.date(2020, 5, k + 1), 9000 + k) for k in range(level))
    lines_out[0] += " " + " ".join(missing)
  instruction = """The photo library in /workspace/library was imported from the camera card
(library/<YYYY>/<MM>/<camera file name>, listed in library/manifest.tsv). The user wrote album
definitions in /workspace/albums.txt, one album per line: `<album>: <camera file name> ...`.

Build the albums without copying photos: for each album create library/albums/<album>/ holding, for
each listed photo, a RELATIVE symlink named like the photo that points at the photo in the library
(so the library can be moved). A listed name that is not in the library gets no link; write all
such names to library/albums/MISSING.txt, one per line, sorted. Do not change anything else."""
  solve = _steps(
    "cat albums.txt; head -5 library/manifest.tsv",
    _oracle("""
rows = load_manifest()
by_name = {rel.rsplit("/", 1)[1]: rel for rel in rows}
missing = []
for line in open("albums.txt"):
  if not line.strip():
    continue
  album, names = line.split(":", 1)
  d = "library/albums/" + album.strip()
  os.makedirs(d, exist_ok=True)
  for n in names.split():
    if n in by_name:
      os.symlink(os.path.relpath("library/" + by_name[n], d), os.path.join(d, n))
    else:
      missing.append(n)
with open("library/albums/MISSING.txt", "w") as f:
  f.writelines(n + "\\n" for n in sorted(missing))
"""),
    "ls -l library/albums/*/ | head -20",
  )
  wrong = solve.replace(
    'os.path.relpath("library/" + by_name[n], d)', 'os.path.abspath("library/" + by_name[n])'
  )
  return TaskSpec(
    instruction,
    ALBUM_CHECK,
    solve,
    wrong,
    files={"albums.txt": "\n".join(lines_out) + "\n"},
    data={"albums": chosen, "missing": missing},
    complexity="moderate",
    language="python",
  )


ROOT = Family(
  "photo_import",
  "file_operations",
  "exact_text",
  "text_only",
  photo_import,
  skills=("file organisation", "hashing", "incremental sync"),
)
FAMILIES = (ROOT,)
CHAIN = ChainFamily(
  name="photo_sync",
  goal="keep a family photo library in sync with the camera card",
  root=ROOT,
  root_requirement="one-way import of the card into a dated library with a manifest",
  extensions=(
    Extension(
      "resync",
      ("photo_import",),
      "second sync with independent edits on both sides (duplicates, adopted photos)",
      resync,
    ),
    Extension(
      "trash_restore",
      ("resync",),
      "third sync with deletions and restores (recycle bin, camera deletions)",
      trash_restore,
    ),
    Extension("albums", ("photo_import",), "albums as relative symlinks into the library", albums),
  ),
)
