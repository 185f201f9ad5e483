"""data_processing families: CSV aggregation, log analysis, JSON reshaping and a multi-stage ETL."""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
import tempfile

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

CHECK_EXACT = """
got = read(DATA["path"]).strip().splitlines()
want = DATA["want"]
if [l.rstrip() for l in got] != want:
  fail(f"{DATA['path']}: {len(got)} lines, expected {len(want)}; got head {got[:3]} want head {want[:3]}")
"""  # noqa: E501 (embedded script, kept verbatim)


def csv_aggregate(rng: random.Random, level: int) -> TaskSpec:
  n = (40, 400, 3000)[level]
  rows, totals, seen = [], {}, set()
  for i in range(n):
    oid = i if level < 2 or rng.random() > 0.1 or not rows else rows[rng.randrange(len(rows))][0]
    region = rng.choice(util.REGIONS)
    note = rng.choice(("ok", "gift, wrapped", "call first, then ship", "fragile", 'said "asap"'))
    cents = rng.randint(100, 99999)
    status = rng.choice(("paid", "paid", "refunded", "pending"))
    rows.append((oid, region, f"{cents // 100}.{cents % 100:02d}", note, status))
    if status == "paid" and oid not in seen:
      totals[region] = totals.get(region, 0) + cents
    seen.add(oid)
  body = "order_id,region,amount,note,status\n" + "".join(util.csv_line(r) + "\n" for r in rows)
  want = ["region,total"] + [f"{r},{c // 100}.{c % 100:02d}" for r, c in sorted(totals.items())]
  dedupe = (
    "\nSome order_id values appear more than once; only the FIRST row of each order_id counts."
    if level >= 2
    else ""
  )
  instruction = f"""/workspace/orders.csv is a CSV export (RFC 4180 quoting; notes may contain
commas and quotes). Compute the total `amount` of orders with status `paid` per region.{dedupe}
Write /workspace/totals.csv with header `region,total`, one row per region that has paid orders,
sorted by region, totals with exactly two decimals."""
  solve = """python3 - <<'PY'
import csv, decimal
tot, seen = {}, set()
for r in csv.DictReader(open('orders.csv', newline='')):
  first = r['order_id'] not in seen
  seen.add(r['order_id'])
  if r['status'] == 'paid' and first:
    tot[r['region']] = tot.get(r['region'], 0) + decimal.Decimal(r['amount'])
with open('totals.csv', 'w') as f:
  f.write('region,total\\n')
  for k in sorted(tot):
    f.write(f'{k},{tot[k]:.2f}\\n')
PY"""
  wrong = (
    """awk -F, 'NR>1 && $5=="paid" {t[$2]+=$3} END {print "region,total"; for (k in t) """
    """printf "%s,%.2f\\n", k, t[k]}' orders.csv | (read h; echo "$h"; sort) > totals.csv"""
  )
  return TaskSpec(
    instruction,
    CHECK_EXACT,
    solve,
    wrong,
    files={"orders.csv": body},
    data={"path": "/workspace/totals.csv", "want": want},
    language="python",
    complexity=("short", "short", "moderate")[level],
  )


def log_top_ips(rng: random.Random, level: int) -> TaskSpec:
  k = (3, 5, 10)[level]
  n_ips = k + (3, 10, 40)[level]
  ips = [
    f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}" for _ in range(n_ips)
  ]
  ips = list(dict.fromkeys(ips))
  counts = {ip: rng.randint(1, 30) for ip in ips}
  ranked = sorted(ips, key=lambda ip: -counts[ip])
  # force ties inside the top k (pairs; an odd k leaves the last one unpaired)
  for a, b in zip(ranked[0:k:2], ranked[1:k:2], strict=False):
    counts[b] = counts[a]
  only_5xx = level >= 1
  lines = []
  for ip, c in counts.items():
    for _ in range(c):
      lines.append((ip, rng.choice((500, 502, 503)) if only_5xx else rng.choice((200, 404, 500))))
    for _ in range(rng.randint(0, 20) if only_5xx else 0):
      lines.append((ip, 200))
  rng.shuffle(lines)
  text = "".join(
    f'{ip} - - [10/Oct/2024:13:{i % 60:02d}:{i % 59:02d} +0000] "GET /{util.word(rng)} HTTP/1.1" '
    f"{st} {rng.randint(100, 9999)}\n"
    for i, (ip, st) in enumerate(lines)
  )
  best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
  want = [f"{c} {ip}" for ip, c in best]
  what = "requests answered with a 5xx status" if only_5xx else "requests"
  instruction = f"""/workspace/access.log is a web server access log (combined format). Find the {k}
client IPs with the most {what}. Write /workspace/top.txt with one line per IP, `<count> <ip>`,
most requests first; break ties by the IP address compared as a plain string (ascending)."""
  flt = "$9 ~ /^5/" if only_5xx else "1"
  solve = (
    f"""awk '{flt} {{print $1}}' access.log | sort | uniq -c | awk '{{print $1, $2}}' """
    f"""| sort -k1,1nr -k2,2 | head -{k} > top.txt"""
  )
  wrong = (
    f"""awk '{flt} {{print $1}}' access.log | sort | uniq -c | sort -rn | head -{k} """
    f"""| awk '{{print $1, $2}}' > top.txt"""
  )
  return TaskSpec(
    instruction,
    CHECK_EXACT,
    solve,
    wrong,
    files={"access.log": text},
    data={"path": "/workspace/top.txt", "want": want},
  )


def json_flatten(rng: random.Random, level: int) -> TaskSpec:
  n = (15, 150, 1000)[level]
  recs, want = [], ["id,name,city,n_tags,email"]
  for i in rng.sample(range(1, 100000), n):
    r = {
      "id": i,
      "name": f"{rng.choice(util.FIRST)} {util.word(rng)}",
      "active": rng.random() < 0.7,
      "address": {"city": util.word(rng).title(), "zip": str(rng.randint(10000, 99999))},
      "tags": [util.word(rng) for _ in range(rng.randint(0, 4))],
    }
    if rng.random() < 0.7:
      r["email"] = f"{r['name'].split()[0]}{i}@example.org"
    if level >= 2 and rng.random() < 0.1:
      del r["address"]
    recs.append(r)
  for r in sorted(recs, key=lambda r: r["id"]):
    if r["active"]:
      want.append(
        f"{r['id']},{r['name']},{r.get('address', {}).get('city', '')},"
        f"{len(r['tags'])},{r.get('email', '')}"
      )
  body = "".join(json.dumps(r) + "\n" for r in recs)
  instruction = """/workspace/users.jsonl has one JSON user per line. Write /workspace/active.csv
with the header `id,name,city,n_tags,email` and one row per user whose `active` is true, sorted by
numeric id: city is address.city, n_tags the number of tags, and a missing field (email, address) is
written as an empty value. No quoting is needed (values contain no commas)."""
  solve = """python3 - <<'PY'
import json
rs = [json.loads(l) for l in open('users.jsonl')]
with open('active.csv', 'w') as f:
  f.write('id,name,city,n_tags,email\\n')
  for r in sorted(rs, key=lambda r: r['id']):
    if r['active']:
      f.write(f"{r['id']},{r['name']},{r.get('address', {}).get('city', '')},{len(r['tags'])},{r.get('email', '')}\\n")
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = """python3 - <<'PY'
import json
rs = [json.loads(l) for l in open('users.jsonl')]
with open('active.csv', 'w') as f:
  f.write('id,name,city,n_tags,email\\n')
  for r in sorted(rs, key=lambda r: r['id']):
    try:
      if r['active']:
        f.write(f"{r['id']},{r['name']},{r['address']['city']},{len(r['tags'])},{r['email']}\\n")
    except KeyError:
      pass
PY"""
  return TaskSpec(
    instruction,
    CHECK_EXACT,
    solve,
    wrong,
    files={"users.jsonl": body},
    data={"path": "/workspace/active.csv", "want": want},
    language="python",
  )


ETL_SOLVE = """python3 - <<'PY'
import csv, json, datetime, glob
rates = {r['currency']: float(r['eur_rate']) for r in csv.DictReader(open('ref/rates.csv'))}
cat = {r['sku']: r['category'] for r in csv.DictReader(open('ref/products.csv'))}
rows = {}
for path in sorted(glob.glob('incoming/*.csv')) + sorted(glob.glob('incoming/*.txt')):
  delim = ';' if path.endswith('.txt') else ','
  for r in csv.DictReader(open(path, newline=''), delimiter=delim):
    d = r['date'].strip()
    if d.isdigit():
      day = datetime.datetime.fromtimestamp(int(d), datetime.timezone.utc).date()
    elif '/' in d:
      dd, mm, yy = d.split('/'); day = datetime.date(int(yy), int(mm), int(dd))
    else:
      day = datetime.date.fromisoformat(d)
    rec = (int(r['version']), day, r['sku'].strip().upper(), float(r['amount']) * rates[r['currency'].strip().upper()])
    if r['order_id'] not in rows or rows[r['order_id']][0] < rec[0]:
      rows[r['order_id']] = rec
out = {}
for _, day, sku, eur in rows.values():
  m = out.setdefault(day.strftime('%Y-%m'), {})
  m[cat[sku]] = m.get(cat[sku], 0.0) + eur
out = {m: {c: round(v, 2) for c, v in sorted(cs.items())} for m, cs in sorted(out.items())}
json.dump(out, open('report.json', 'w'), indent=1)
PY"""  # noqa: E501 (embedded script, kept verbatim)


def etl_pipeline(rng: random.Random, level: int) -> TaskSpec:
  n_src, n = (2, 3, 5)[level], (30, 200, 800)[level]
  rates = {
    "EUR": 1.0,
    "USD": round(rng.uniform(0.8, 0.99), 4),
    "GBP": round(rng.uniform(1.1, 1.2), 4),
    "JPY": round(rng.uniform(0.005, 0.008), 6),
  }
  skus = {f"SKU{i:03d}": rng.choice(("tools", "garden", "toys", "books")) for i in range(12)}
  fmts = ["iso", "dmy", "epoch"][: 1 + level]
  files = {
    "ref/rates.csv": "currency,eur_rate\n" + "".join(f"{c},{r}\n" for c, r in rates.items()),
    "ref/products.csv": "sku,category\n" + "".join(f"{s},{c}\n" for s, c in skus.items()),
  }
  latest = {}
  for s in range(n_src):
    fmt = fmts[s % len(fmts)]
    semi = level >= 1 and s == n_src - 1
    head = ["order_id", "version", "date", "sku", "amount", "currency"]
    out = [(";" if semi else ",").join(head)]
    for _ in range(n):
      oid = f"O{rng.randint(1, n * n_src // 2)}"
      ver = rng.randint(1, 9)
      day = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 150))
      d = {
        "iso": day.isoformat(),
        "dmy": day.strftime("%d/%m/%Y"),
        "epoch": str(
          int(datetime.datetime(day.year, day.month, day.day, 12, tzinfo=datetime.UTC).timestamp())
        ),
      }[fmt]
      sku = rng.choice(list(skus))
      if level >= 1 and rng.random() < 0.2:
        sku = " " + sku.lower()
      cur = rng.choice(list(rates))
      amt = f"{rng.randint(100, 50000) / 100:.2f}"
      out.append((";" if semi else ",").join((oid, str(ver), d, sku, amt, cur)))
      key = oid
      if key not in latest or latest[key] < ver:
        latest[key] = ver
    ext = "txt" if semi else "csv"
    files[f"incoming/store{s}.{ext}"] = "\n".join(out) + "\n"
  # versions must be unique per order for a well-defined answer: make them so
  seen: dict[str, set] = {}
  for rel in sorted(files):
    if not rel.startswith("incoming/"):
      continue
    delim = ";" if rel.endswith(".txt") else ","
    lines = files[rel].splitlines()
    fixed = [lines[0]]
    for ln in lines[1:]:
      parts = ln.split(delim)
      vs = seen.setdefault(parts[0], set())
      v = int(parts[1])
      while v in vs:
        v += 10
      vs.add(v)
      parts[1] = str(v)
      fixed.append(delim.join(parts))
    files[rel] = "\n".join(fixed) + "\n"
  rules = [
    "files ending in .csv use `,`; files ending in .txt use `;` as the delimiter",
    "dates come as YYYY-MM-DD, DD/MM/YYYY or unix epoch seconds (UTC)",
    "sku values may have stray spaces and lower case; normalise to upper case",
    "an order_id can appear several times (also across files): keep only the row with the highest "
    "version",
    "convert amount to EUR with ref/rates.csv (eur_rate = EUR per unit of currency)",
    "map sku -> category with ref/products.csv",
  ]
  instruction = (
    """Build a monthly revenue report from the order exports in /workspace/incoming/.
Rules:
"""
    + "".join(f"- {r}\n" for r in rules)
    + """
Write /workspace/report.json: an object mapping "YYYY-MM" (month of the order date) to an object
mapping category -> total EUR revenue for that month, rounded to 2 decimals. Include only months and
categories that have orders."""
  )
  check = """
import subprocess, json
want = DATA["want"]
try:
  got = json.load(open("/workspace/report.json"))
except Exception as e:
  fail(f"report.json unreadable: {e}")
if sorted(got) != sorted(want):
  fail(f"months {sorted(got)} != {sorted(want)}")
for m in want:
  if sorted(got[m]) != sorted(want[m]):
    fail(f"{m}: categories {sorted(got[m])} != {sorted(want[m])}")
  for c, v in want[m].items():
    if not isinstance(got[m][c], (int, float)) or abs(got[m][c] - v) > 0.02:
      fail(f"{m}/{c}: {got[m][c]} != {v}")
"""
  want = _run_etl(files)
  wrong = ETL_SOLVE.replace("* rates[r['currency'].strip().upper()]", "").replace(
    "if r['order_id'] not in rows or rows[r['order_id']][0] < rec[0]:", "if True:"
  )
  return TaskSpec(
    instruction,
    check,
    ETL_SOLVE,
    wrong,
    files=files,
    data={"want": want},
    complexity=("moderate", "complex", "intricate")[level],
    language="python",
  )


def _run_etl(files: dict[str, str]) -> dict:
  """Runs the oracle logic in-process on the generated files to get the expected report."""
  with tempfile.TemporaryDirectory() as d:
    for rel, body in files.items():
      os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
      with open(os.path.join(d, rel), "w") as f:
        f.write(body)
    script = ETL_SOLVE.split("<<'PY'\n", 1)[1].rsplit("\nPY", 1)[0]
    subprocess.run([sys.executable, "-c", script], cwd=d, check=True)
    with open(os.path.join(d, "report.json")) as f:
      return json.load(f)


FAMILIES = (
  Family("csv_aggregate", "data_processing", "exact_text", "text_only", csv_aggregate, ("csv",)),
  Family("log_top_ips", "data_processing", "exact_text", "text_only", log_top_ips, ("awk", "sort")),
  Family("json_flatten", "data_processing", "exact_text", "text_only", json_flatten, ("json",)),
  Family(
    "etl_pipeline", "data_processing", "metric_threshold", "text_only", etl_pipeline, ("etl",)
  ),
)
