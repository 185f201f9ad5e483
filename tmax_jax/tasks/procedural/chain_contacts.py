"""contacts_sync chain (data_processing): CSV import -> three-way merge -> tombstones / restore.

  contacts_import  normalise the CRM's messy January export (emails, names, phones, two date
                   formats, quoted commas, duplicates: the latest row wins; rows without a valid
                   email rejected) into version v1 of the contacts table
  merge            the CRM's February export and the sales team's own edits both changed contacts
                   since v1: a field-level three-way merge against v1 (a field changed on one side
                   takes that side; changed on both -> the later edit wins and the conflict is
                   listed) gives v2
  tombstones       (after merge) CRM deletions arrive with a late, re-sent export that mixes old
                   and new rows: deletions become tombstones that stale rows cannot resurrect (a
                   row newer than the deletion re-creates the contact), giving v3
  point_restore    (branch after merge) contacts the February changes broke go back to their v1
                   row (or are removed when v1 did not have them), giving v3

The table lives in warehouse/contacts/ as immutable versions v<N>.csv (and side files of that
version) plus a CURRENT file naming the latest. Every generation's check reads only the files of
the version it wrote and requires CURRENT to name an existing version, so it stays exact under
every later generation.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Sequence

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.chains import STEP_MARK, ChainFamily, Extension, patched
from tmax_jax.tasks.procedural.core import Family, TaskSpec

FIELDS = ("email", "name", "phone", "city", "updated")
EDITABLE = ("name", "phone", "city")
EXPORT_HEADER = ("Email", "Full Name", "Phone", "City", "Last Modified")
CITIES = (
  "Portland, OR",
  "Austin",
  "Boston",
  "Denver",
  "Reno, NV",
  "Tulsa",
  "Salem, MA",
  "Omaha",
  "Fargo",
  "Boise",
)
LAST = (
  "Okafor",
  "Lindqvist",
  "Moreau",
  "Tanaka",
  "Silva",
  "Novak",
  "Haddad",
  "Kowalski",
  "Brandt",
  "Ferreira",
  "Ivanova",
  "Mensah",
)
DOMAINS = ("example.com", "example.org", "mail.test")

CHECK_COMMON = """
import csv
W = "warehouse/contacts"


def table(path):
  if not os.path.isfile(path):
    fail(f"{path} does not exist")
  with open(path, newline="", encoding="utf-8") as f:
    return list(csv.reader(f))


def expect_csv(path, header, rows):
  got = table(path)
  if not got or got[0] != header:
    fail(f"{path}: the header should be {','.join(header)}, got {got[:1]}")
  if got[1:] != rows:
    diff = next((i for i, (a, b) in enumerate(zip(got[1:], rows)) if a != b), None)
    where = (f"row {diff + 1} is {got[diff + 1]}, expected {rows[diff]}" if diff is not None else
             f"it has {len(got) - 1} rows, expected {len(rows)}")
    fail(f"{path} is not the expected table: {where}")


def expect_current():
  cur = read(W + "/CURRENT").strip() if os.path.isfile(W + "/CURRENT") else ""
  if not cur or not os.path.isfile(f"{W}/{cur}.csv"):
    fail(f"{W}/CURRENT must name an existing version (found {cur!r})")
"""

TABLE = list(FIELDS)

IMPORT_CHECK = (
  CHECK_COMMON
  + f"""
expect_csv(W + "/v1.csv", {TABLE!r}, DATA["v1"])
rejected = lines(W + "/v1.rejected") if os.path.isfile(W + "/v1.rejected") else []
if rejected != [str(n) for n in DATA["rejected"]]:
  fail(f"{{W}}/v1.rejected should list the lines {{DATA['rejected']}}, got {{rejected}}")
expect_current()
"""
)

# The table helpers every oracle of the chain shares (python, run from /workspace).
ORACLE_LIB = """import csv, datetime, os, re
FIELDS = ["email", "name", "phone", "city", "updated"]
W = "warehouse/contacts"
def norm_email(s):
  s = s.strip().lower()
  local, _, domain = s.partition("@")
  ok = local and "." in domain and "@" not in domain and not re.search(r"\\s", s)
  return s if ok else ""
def norm_phone(s):
  d = re.sub(r"\\D", "", s)
  d = d[1:] if len(d) == 11 and d[0] == "1" else d
  return "+1" + d if len(d) == 10 else ""
def norm_time(s):
  for fmt in ("%Y-%m-%d %H:%M:%S", "%d/%m/%Y %H:%M"):
    try:
      return datetime.datetime.strptime(s.strip(), fmt).strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
      pass
  raise ValueError(f"unknown time format {s!r}")
def read_export(path):
  rows, bad = {}, []
  with open(path, newline="") as f:
    reader = csv.reader(f)
    next(reader)
    for no, rec in enumerate(reader, 2):
      email = norm_email(rec[0])
      if not email:
        bad.append(no)
        continue
      row = {"email": email, "name": " ".join(rec[1].split()), "phone": norm_phone(rec[2]),
             "city": rec[3].strip(), "updated": norm_time(rec[4])}
      if email not in rows or row["updated"] > rows[email]["updated"]:
        rows[email] = row
  return rows, bad
def current():
  return open(W + "/CURRENT").read().strip()
def next_version():
  return "v%d" % (int(current()[1:]) + 1)
def read_table(version):
  with open(f"{W}/{version}.csv", newline="") as f:
    return {r["email"]: r for r in csv.DictReader(f)}
def write_csv(path, header, rows):
  with open(path + ".tmp", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\\n")
    w.writerow(header)
    w.writerows(rows)
  os.replace(path + ".tmp", path)
def write_table(version, table):
  write_csv(f"{W}/{version}.csv", FIELDS, [[table[e][k] for k in FIELDS] for e in sorted(table)])
def set_current(version):
  with open(W + "/CURRENT.tmp", "w") as f:
    f.write(version + "\\n")
  os.replace(W + "/CURRENT.tmp", W + "/CURRENT")
"""


def _oracle(body: str) -> str:
  return "python3 - <<'PY'\n" + ORACLE_LIB + body.strip("\n") + "\nPY"


def _steps(explore: str, work: str, verify: str) -> str:
  """An oracle in three tool calls for scripted teachers (chains.STEP_MARK)."""
  return f"{explore}\n{STEP_MARK}\n{work}\n{STEP_MARK}\n{verify}"


# ---------------------------------------------------------------------------------- generation
# A contact is {"email", "name", "phone", "city", "updated": datetime}; tables map email -> it.


def _iso(t: datetime.datetime) -> str:
  return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(s: str) -> datetime.datetime:
  return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")


def _time(rng: random.Random, month: int, first: int = 1, last: int = 28) -> datetime.datetime:
  second = 0 if rng.random() < 0.5 else rng.randint(1, 59)  # only :00 can use DD/MM/YYYY HH:MM
  return datetime.datetime(
    2024, month, rng.randint(first, last), rng.randint(7, 19), rng.randint(0, 59), second
  )


def _name(rng: random.Random) -> str:
  return f"{rng.choice(util.FIRST).title()} {rng.choice(LAST)}"


def _phone(rng: random.Random) -> str:
  area, exchange = rng.randint(200, 999), rng.randint(200, 999)
  return f"+1{area}{exchange}{rng.randint(0, 9999):04d}"


def _new_value(rng: random.Random, field: str, old: str) -> str:
  make = {
    "name": lambda: old.split()[0] + " " + rng.choice(LAST),
    "phone": lambda: _phone(rng),
    "city": lambda: rng.choice(CITIES),
  }[field]
  while True:
    value = make()
    if value != old:
      return value


def _contact(rng: random.Random, used: set, when: datetime.datetime) -> dict:
  while True:
    name = _name(rng)
    email = f"{name.lower().replace(' ', '.')}{rng.randint(1, 99)}@{rng.choice(DOMAINS)}"
    if email not in used:
      used.add(email)
      return {
        "email": email,
        "name": name,
        "phone": _phone(rng) if rng.random() < 0.9 else "",
        "city": rng.choice(CITIES),
        "updated": when,
      }


def _messy(rng: random.Random, c: dict) -> list[str]:
  """One export line for contact `c` as the CRM writes it (case, spacing, phone/date formats)."""
  email = rng.choice((c["email"], c["email"].upper(), f" {c['email']}", f"{c['email'].title()} "))
  name = rng.choice((c["name"], c["name"].replace(" ", "  "), f" {c['name']} "))
  d = c["phone"][2:]
  phone = (
    ""
    if not d
    else rng.choice(
      (
        f"({d[:3]}) {d[3:6]}-{d[6:]}",
        f"{d[:3]}.{d[3:6]}.{d[6:]}",
        f"+1 {d[:3]} {d[3:6]} {d[6:]}",
        f"1-{d[:3]}-{d[3:6]}-{d[6:]}",
      )
    )
  )
  t = c["updated"]
  when = (
    t.strftime("%d/%m/%Y %H:%M")
    if t.second == 0 and rng.random() < 0.6
    else t.strftime("%Y-%m-%d %H:%M:%S")
  )
  return [email, name, phone, c["city"] if rng.random() < 0.7 else f" {c['city']}", when]


def _csv(header, rows) -> str:
  return "".join(util.csv_line(r) + "\n" for r in [header, *rows])


def _rows(table: dict) -> list[list[str]]:
  return [
    [table[e][k] if k != "updated" else _iso(table[e][k]) for k in FIELDS] for e in sorted(table)
  ]


def _state(table: dict) -> dict:
  return {e: {**c, "updated": _iso(c["updated"])} for e, c in table.items()}


def _table(state: dict) -> dict:
  return {e: {**c, "updated": _parse(c["updated"])} for e, c in state.items()}


def contacts_import(rng: random.Random, level: int) -> TaskSpec:
  used: set = set()
  table = {}
  for _ in range((8, 20, 45)[level]):
    c = _contact(rng, used, _time(rng, 1))
    table[c["email"]] = c
  lines = [_messy(rng, c) for c in table.values()]
  # Older rows of some contacts (the CRM exports every revision); the first one comes before the
  # latest revision, so "keep the first row" is wrong.
  for k, email in enumerate(rng.sample(sorted(table), (2, 3, 5)[level])):
    c = table[email]
    old = dict(
      c,
      updated=c["updated"] - datetime.timedelta(days=rng.randint(1, 20), hours=3),
      city=_new_value(rng, "city", c["city"]),
    )
    at = next(i for i, row in enumerate(lines) if row[0].strip().lower() == email)
    lines.insert(at if k == 0 else rng.randint(0, len(lines)), _messy(rng, old))
  for bad in ("", "n/a", "ana.birch(at)example.com")[: (1, 2, 3)[level]]:
    lines.insert(
      rng.randint(1, len(lines)),
      [bad, _name(rng), "", rng.choice(CITIES), _time(rng, 1).strftime("%Y-%m-%d %H:%M:%S")],
    )
  rejected = [i + 2 for i, row in enumerate(lines) if "@" not in row[0]]
  instruction = """The CRM exported our contacts to /workspace/exports/crm_2024-01.csv (header
`Email,Full Name,Phone,City,Last Modified`; fields with commas are quoted). Load it as version v1
of the contacts table in /workspace/warehouse/contacts/:
- v1.csv: header `email,name,phone,city,updated`, one row per contact, sorted by email, written as
  standard CSV (quote fields that contain commas);
- email: trimmed and lowercased; a row without a valid email (exactly one @, a dot in the domain,
  no spaces) is rejected, and v1.rejected lists the line numbers of the rejected rows in the export
  (the header is line 1), one per line;
- name: inner runs of spaces collapsed, trimmed; city: trimmed;
- phone: `+1` followed by the 10 digits (the CRM writes (555) 123-4567, 555.123.4567,
  +1 555 123 4567, 1-555-123-4567); an empty phone stays empty;
- updated: Last Modified, which is `YYYY-MM-DD HH:MM:SS` or `DD/MM/YYYY HH:MM` (UTC), written as
  `YYYY-MM-DDTHH:MM:SSZ`;
- the CRM exports every revision of a contact: when an email appears several times keep the row
  with the latest Last Modified;
- finally write `v1` to warehouse/contacts/CURRENT.
Later loads build new versions from this one; a written version is never changed."""
  solve = _steps(
    "head -5 exports/crm_2024-01.csv; wc -l exports/crm_2024-01.csv",
    _oracle("""
os.makedirs(W, exist_ok=True)
rows, bad = read_export("exports/crm_2024-01.csv")
write_table("v1", rows)
with open(W + "/v1.rejected", "w") as f:
  f.writelines(f"{n}\\n" for n in bad)
set_current("v1")
"""),
    "test -s warehouse/contacts/v1.csv && cat warehouse/contacts/CURRENT "
    "warehouse/contacts/v1.rejected && head -3 warehouse/contacts/v1.csv",
  )
  # Plausible wrong: of the duplicated emails keep the first row of the export.
  wrong = patched(
    solve,
    ('if email not in rows or row["updated"] > rows[email]["updated"]:', "if email not in rows:"),
  )
  return TaskSpec(
    instruction,
    IMPORT_CHECK,
    solve,
    wrong,
    files={"exports/crm_2024-01.csv": _csv(EXPORT_HEADER, lines)},
    data={"v1": _rows(table), "rejected": rejected, "state": _state(table)},
    complexity=("moderate", "moderate", "complex")[level],
    language="python",
  )


CONFLICT_HEADER = ["email", "field", "crm_value", "sales_value", "winner"]

MERGE_CHECK = (
  CHECK_COMMON
  + f"""
expect_csv(W + "/v2.csv", {TABLE!r}, DATA["v2"])
expect_csv(W + "/v2.conflicts.csv", {CONFLICT_HEADER!r}, DATA["conflicts"])
expect_current()
"""
)

MERGE_FIELDS = """  for k in ("name", "phone", "city"):
    cv, sv = (c or b)[k], (s or b)[k]
    if cv != b[k] and sv != b[k] and cv != sv:
      winner = "crm" if c["updated"] > s["updated"] else "sales"
      row[k] = cv if winner == "crm" else sv
      conflicts.append([email, k, cv, sv, winner])
    elif cv != b[k]:
      row[k] = cv
    elif sv != b[k]:
      row[k] = sv
"""

MERGE_BODY = (
  """
base = read_table(current())
crm, _ = read_export("exports/crm_2024-02.csv")
with open("edits/sales_2024-02.csv", newline="") as f:
  sales = {r["email"]: r for r in csv.DictReader(f)}
out, conflicts = {}, []
for email in sorted(set(base) | set(crm)):
  b, c, s = base.get(email), crm.get(email), sales.get(email)
  if b is None:
    out[email] = c
    continue
  row = dict(b)
"""
  + MERGE_FIELDS
  + """  row["updated"] = max(x["updated"] for x in (b, c, s) if x)
  out[email] = row
version = next_version()
write_table(version, out)
write_csv(f"{W}/{version}.conflicts.csv", ["email", "field", "crm_value", "sales_value",
                                           "winner"], conflicts)
set_current(version)
"""
)


def _edit(rng: random.Random, c: dict, fields, when: datetime.datetime, values=None) -> dict:
  values = values or {f: _new_value(rng, f, c[f]) for f in fields}
  return dict(c, updated=when, **values)


def _merge(base: dict, crm: dict, sales: dict) -> tuple[dict, list]:
  """The expected three-way merge (see the merge instruction) -> (table, conflict rows)."""
  out, conflicts = {}, []
  for email in sorted(set(base) | set(crm)):
    b, c, s = base.get(email), crm.get(email), sales.get(email)
    if b is None:
      out[email] = c
      continue
    row = dict(b)
    for k in EDITABLE:
      cv, sv = (c or b)[k], (s or b)[k]
      if cv != b[k] and sv != b[k] and cv != sv:
        winner = "crm" if c["updated"] > s["updated"] else "sales"
        row[k] = cv if winner == "crm" else sv
        conflicts.append([email, k, cv, sv, winner])
      elif cv != b[k] or sv != b[k]:
        row[k] = cv if cv != b[k] else sv
    row["updated"] = max(x["updated"] for x in (b, c, s) if x)
    out[email] = row
  return out, conflicts


def _groups(rng: random.Random, emails, sizes: dict, level: int) -> dict:
  order = sorted(emails)
  rng.shuffle(order)
  out, i = {}, 0
  for key, n in sizes.items():
    out[key], i = order[i : i + n[level]], i + n[level]
  return out


def _feb_edits(rng: random.Random, base: dict, level: int) -> tuple[dict, dict]:
  """The CRM's February rows and the sales team's edits of the same period."""
  g = _groups(
    rng,
    base,
    {
      "crm": (2, 4, 8),
      "sales": (1, 3, 6),
      "both": (1, 2, 3),
      "conflict": (2, 3, 5),
      "same": (0, 1, 2),
      "again": (1, 2, 3),
    },
    level,
  )
  crm, sales = {}, {}
  for e in g["crm"]:
    crm[e] = _edit(rng, base[e], [rng.choice(EDITABLE)], _time(rng, 2))
  for e in g["sales"]:
    sales[e] = _edit(rng, base[e], [rng.choice(EDITABLE)], _time(rng, 2))
  for e in g["both"]:  # different fields: both changes survive (row-level "latest wins" loses one)
    f1, f2 = rng.sample(EDITABLE, 2)
    crm[e], sales[e] = (
      _edit(rng, base[e], [f1], _time(rng, 2)),
      _edit(rng, base[e], [f2], _time(rng, 2)),
    )
  for j, e in enumerate(g["conflict"] + g["same"]):
    f = rng.choice(EDITABLE)
    cv = _new_value(rng, f, base[e][f])
    sv = cv if e in g["same"] else _new_value(rng, f, cv)
    while sv == base[e][f]:
      sv = _new_value(rng, f, cv)
    early, late = _time(rng, 2, 1, 14), _time(rng, 2, 15, 28)
    tc, ts = (late, early) if j % 2 == 0 else (early, late)  # the CRM wins the first conflict
    crm[e], sales[e] = (_edit(rng, base[e], (), tc, {f: cv}), _edit(rng, base[e], (), ts, {f: sv}))
  for e in g["again"]:  # re-exported unchanged
    crm[e] = dict(base[e])
  used = set(base)
  for _ in range((2, 4, 8)[level]):
    c = _contact(rng, used, _time(rng, 2))
    crm[c["email"]] = c
  return crm, sales


def merge(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  base = _table(specs[-1].data["state"])
  crm, sales = _feb_edits(rng, base, level)
  table, conflicts = _merge(base, crm, sales)
  lines = [_messy(rng, c) for c in crm.values()]
  lines.append(["unknown", _name(rng), "", rng.choice(CITIES), "2024-02-02 10:00:00"])
  rng.shuffle(lines)
  edits = [[c[k] if k != "updated" else _iso(c[k]) for k in FIELDS] for c in sales.values()]
  rng.shuffle(edits)
  instruction = """The contacts table in /workspace/warehouse/contacts/ is versioned: CURRENT names
the latest version (v1, loaded from the CRM's January export), v<N>.csv holds it (`email,name,
phone,city,updated`). Since v1, two sources changed contacts independently:
- the CRM's February export exports/crm_2024-02.csv (same format and normalisation rules as the
  January load: trimmed lowercase emails, collapsed names, +1 phones, UTC Last Modified in either
  date format; rows without a valid email are skipped); it has changed and new contacts and also
  re-exports some unchanged ones;
- the sales team's edits edits/sales_2024-02.csv (already in the table's format), full rows of
  existing contacts after their edit.
Build version v2 by a field-level three-way merge against v1: for each of name, phone and city, a
field changed (differs from v1) by only one source takes that source's value; changed by both to
the same value takes it; changed by both to different values is a conflict, won by the source whose
row has the later `updated`. A contact only the CRM has is added. `updated` of a contact is the
latest of its v1 row and the source rows it has. Write v2.csv (same format as v1.csv) and
v2.conflicts.csv (`email,field,crm_value,sales_value,winner`, winner `crm` or `sales`, sorted by
email, then name/phone/city order), then point CURRENT to v2. Do not change v1."""
  solve = _steps(
    "cat warehouse/contacts/CURRENT; head -3 exports/crm_2024-02.csv edits/sales_2024-02.csv",
    _oracle(MERGE_BODY),
    "cat warehouse/contacts/v2.conflicts.csv && diff warehouse/contacts/v1.csv "
    "warehouse/contacts/v2.csv | head -20",
  )
  # Plausible wrong: row-level "latest wins" (the other source's changes to other fields are lost).
  wrong = patched(
    solve,
    (
      MERGE_FIELDS,
      "  row = dict(max((x for x in (c, s) if x), key=lambda x: "
      "x['updated']) if (c or s) else b)\n",
    ),
  )
  return TaskSpec(
    instruction,
    MERGE_CHECK,
    solve,
    wrong,
    files={
      "exports/crm_2024-02.csv": _csv(EXPORT_HEADER, lines),
      "edits/sales_2024-02.csv": _csv(FIELDS, edits),
    },
    data={"v2": _rows(table), "conflicts": conflicts, "state": _state(table)},
    complexity="complex",
    language="python",
  )


TOMB_CHECK = (
  CHECK_COMMON
  + f"""
expect_csv(W + "/v3.csv", {TABLE!r}, DATA["v3"])
expect_csv(W + "/v3.tombstones.csv", ["email", "deleted_at"], DATA["tombstones"])
expect_current()
"""
)

TOMB_GUARD = """  if e in tombs:
    if row["updated"] <= tombs[e]:
      continue  # a stale row must not resurrect a deleted contact
    del tombs[e]
"""

TOMB_BODY = (
  """
table = read_table(current())
export, _ = read_export("exports/crm_2024-03.csv")
tombs = {}
with open("exports/crm_2024-03_deleted.csv", newline="") as f:
  reader = csv.reader(f)
  next(reader)
  for rec in reader:
    e, t = norm_email(rec[0]), norm_time(rec[1])
    tombs[e] = max(t, tombs.get(e, t))
    table.pop(e, None)
for e, row in sorted(export.items()):
"""
  + TOMB_GUARD
  + """  if e not in table or row["updated"] > table[e]["updated"]:
    table[e] = row
version = next_version()
write_table(version, table)
write_csv(f"{W}/{version}.tombstones.csv", ["email", "deleted_at"],
          [[e, tombs[e]] for e in sorted(tombs)])
set_current(version)
"""
)


def tombstones(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  base = _table(specs[-1].data["state"])
  g = _groups(rng, base, {"deleted": (2, 3, 5), "update": (2, 3, 6), "stale": (1, 1, 2)}, level)
  when = {e: _time(rng, 3, 5, 18) for e in g["deleted"]}
  resent = g["deleted"][: (1, 2, 3)[level]]  # their old rows, re-sent after the deletion
  recreated = g["deleted"][-1]
  rows = {e: base[e] for e in resent}
  rows[recreated] = _edit(rng, base[recreated], ["phone"], _time(rng, 3, 20, 28))
  for e in g["update"]:
    rows[e] = _edit(rng, base[e], rng.sample(EDITABLE, rng.randint(1, 2)), _time(rng, 3))
  for e in g["stale"]:  # an old revision, older than the stored row
    older = base[e]["updated"] - datetime.timedelta(days=rng.randint(1, 9), minutes=7)
    rows[e] = _edit(rng, base[e], [rng.choice(EDITABLE)], older)
  used = set(base)
  for _ in range((1, 2, 3)[level]):
    c = _contact(rng, used, _time(rng, 3))
    rows[c["email"]] = c
  table = {e: c for e, c in base.items() if e not in when}
  table[recreated] = rows[recreated]
  for e in g["update"] + [e for e in rows if e not in base]:
    table[e] = rows[e]
  tombs = [[e, _iso(when[e])] for e in sorted(when) if e != recreated]
  lines = [_messy(rng, c) for c in rows.values()]
  rng.shuffle(lines)
  deletions = [
    [m[0], m[4]] for m in (_messy(rng, dict(base[e], updated=when[e])) for e in g["deleted"])
  ]
  rng.shuffle(deletions)
  instruction = """The contacts table in /workspace/warehouse/contacts/ is versioned (CURRENT names
the latest version, v2; v<N>.csv = `email,name,phone,city,updated`). In March the CRM erased some
contacts: exports/crm_2024-03_deleted.csv (`Email,Deleted At`, the CRM's usual email and time
formats). Its March export exports/crm_2024-03.csv was re-sent late and mixes new rows with old
revisions, including old rows of the erased contacts. Build version v3:
- every deletion removes the contact and leaves a tombstone (email, deleted_at);
- an export row (normalised like every CRM load) replaces the stored contact only when its Last
  Modified is later than the stored `updated`; a contact the table does not have is added, EXCEPT
  that a row of a tombstoned email is ignored unless it is later than the deletion (a stale row
  must not resurrect an erased contact); a later row re-creates the contact and lifts the
  tombstone;
- write v3.csv (same format) and v3.tombstones.csv (`email,deleted_at`, the tombstones still in
  force, times as `YYYY-MM-DDTHH:MM:SSZ`, sorted by email), then point CURRENT to v3.
Earlier versions are never changed."""
  solve = _steps(
    "cat warehouse/contacts/CURRENT; cat exports/crm_2024-03_deleted.csv; "
    "head -4 exports/crm_2024-03.csv",
    _oracle(TOMB_BODY),
    "cat warehouse/contacts/v3.tombstones.csv && diff warehouse/contacts/v2.csv "
    "warehouse/contacts/v3.csv | head -20",
  )
  # Plausible wrong: delete, then upsert the export without looking at the tombstones.
  wrong = patched(solve, (TOMB_GUARD, ""))
  return TaskSpec(
    instruction,
    TOMB_CHECK,
    solve,
    wrong,
    files={
      "exports/crm_2024-03_deleted.csv": _csv(("Email", "Deleted At"), deletions),
      "exports/crm_2024-03.csv": _csv(EXPORT_HEADER, lines),
    },
    data={"v3": _rows(table), "tombstones": tombs},
    complexity="complex",
    language="python",
  )


RESTORE_CHECK = (
  CHECK_COMMON
  + f"""
expect_csv(W + "/v3.csv", {TABLE!r}, DATA["v3"])
expect_csv(W + "/v3.restored.csv", ["email", "action"], DATA["restored"])
expect_current()
"""
)

RESTORE_REMOVE = """  else:
    now.pop(e, None)
    log.append([e, "removed"])
"""

RESTORE_BODY = (
  """
now, v1 = read_table(current()), read_table("v1")
log = []
for line in open("requests/restore.txt"):
  if not line.strip() or line.lstrip().startswith("#"):
    continue
  e = norm_email(line)
  if e in v1:
    now[e] = v1[e]
    log.append([e, "restored"])
"""
  + RESTORE_REMOVE
  + """version = next_version()
write_table(version, now)
write_csv(f"{W}/{version}.restored.csv", ["email", "action"], sorted(log))
set_current(version)
"""
)


def point_restore(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  v1, v2 = _table(specs[0].data["state"]), _table(specs[-1].data["state"])
  changed = sorted(e for e in v2 if e in v1 and v2[e] != v1[e])
  asked = rng.sample(changed, (1, 2, 4)[level]) + rng.sample(sorted(set(v2) - set(v1)), 1)
  table = {e: v1[e] if e in asked else c for e, c in v2.items() if e not in asked or e in v1}
  restored = sorted([e, "restored" if e in v1 else "removed"] for e in asked)
  request = [rng.choice((e, e.upper(), f"  {e}")) for e in asked]
  rng.shuffle(request)
  request.insert(rng.randint(0, len(request)), "")
  request.insert(0, f"# contacts broken by the February sync (ticket OPS-{rng.randint(100, 999)})")
  instruction = """The contacts table in /workspace/warehouse/contacts/ is versioned (CURRENT names
the latest version, v2, built by merging the CRM's February export and the sales team's edits
into v1; v<N>.csv = `email,name,phone,city,updated`). Some contacts came out of the February
merge wrong. requests/restore.txt lists them (one email per line, any case and spacing; blank
lines and lines starting with # are ignored). Build version v3 = v2 with each listed contact put
back exactly as it was in v1 (its whole v1 row, `updated` included); a listed contact that did not
exist in v1 was created by the bad sync and is removed. Write v3.csv (same format) and
v3.restored.csv (`email,action`, action `restored` or `removed`, sorted by email), then point
CURRENT to v3. Earlier versions are never changed."""
  solve = _steps(
    "cat warehouse/contacts/CURRENT requests/restore.txt; ls warehouse/contacts",
    _oracle(RESTORE_BODY),
    "cat warehouse/contacts/v3.restored.csv && diff "
    "warehouse/contacts/v2.csv warehouse/contacts/v3.csv | head -20",
  )
  # Plausible wrong: restore what v1 has and leave the contacts v1 did not have in place.
  wrong = patched(solve, (RESTORE_REMOVE, "  else:\n    log.append([e, 'removed'])\n"))
  return TaskSpec(
    instruction,
    RESTORE_CHECK,
    solve,
    wrong,
    files={"requests/restore.txt": "\n".join(request) + "\n"},
    data={"v3": _rows(table), "restored": restored},
    complexity="moderate",
    language="python",
  )


ROOT = Family(
  "contacts_import",
  "data_processing",
  "exact_text",
  "text_only",
  contacts_import,
  skills=("csv", "data cleaning", "deduplication"),
)
FAMILIES = (ROOT,)
CHAIN = ChainFamily(
  name="contacts_sync",
  goal="keep a versioned contacts table in sync with the CRM and sales",
  root=ROOT,
  root_requirement="load the CRM's messy CSV export as version v1",
  extensions=(
    Extension(
      "merge",
      ("contacts_import",),
      "a field-level three-way merge of CRM and sales edits into v2",
      merge,
    ),
    Extension(
      "tombstones",
      ("merge",),
      "deletions as tombstones that stale re-sent rows cannot resurrect",
      tombstones,
    ),
    Extension(
      "point_restore",
      ("merge",),
      "put listed contacts back to their v1 rows in a new version",
      point_restore,
    ),
  ),
)
