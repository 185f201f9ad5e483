"""data_querying families: SQL answers, SQL fuzz-equivalence, jq and rotated-log queries."""

from __future__ import annotations

import gzip
import json
import random
import re

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

CHECK_ANSWER = """
got = [l.strip() for l in read("/workspace/answer.txt").strip().splitlines()]
if got != DATA["want"]:
  fail(f"answer.txt {got[:3]} != expected {DATA['want'][:3]}")
"""

SCHEMA = """CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
  month TEXT NOT NULL, status TEXT NOT NULL, amount_cents INTEGER NOT NULL);
"""  # noqa: E501 (embedded script, kept verbatim)


def _shop(rng: random.Random, n_cust: int, n_orders: int, zero_customers: int = 0):
  countries = ("DE", "FR", "JP", "BR")
  names = sorted(
    {f"{rng.choice(util.FIRST).title()} {util.word(rng).title()}" for _ in range(n_cust * 2)}
  )
  cust = [(i + 1, n, rng.choice(countries)) for i, n in enumerate(rng.sample(names, n_cust))]
  active = cust[: max(1, n_cust - zero_customers)]
  orders = [
    (
      i + 1,
      rng.choice(active)[0],
      f"2024-{rng.randint(1, 6):02d}",
      rng.choice(("paid", "paid", "paid", "refunded")),
      rng.randint(500, 90000),
    )
    for i in range(n_orders)
  ]
  return cust, orders


def _dump(cust, orders) -> str:
  out = [SCHEMA]
  out += [f"INSERT INTO customers VALUES ({i}, '{n}', '{c}');\n" for i, n, c in cust]
  out += [
    f"INSERT INTO orders VALUES ({o[0]}, {o[1]}, '{o[2]}', '{o[3]}', {o[4]});\n" for o in orders
  ]
  return "".join(out)


def _sql_answer(level, cust, orders, month, who, paid_only=True):
  names = {i: (n, c) for i, n, c in cust}
  tot = {}
  for _, cid, m, st, amt in orders:
    if (st == "paid" or not paid_only) and (level == 0 or m == month or level == 2):
      tot[cid] = tot.get(cid, 0) + amt
  if level == 0:
    return [str(tot.get(who, 0))]
  if level == 1:
    best = sorted(tot.items(), key=lambda kv: (-kv[1], names[kv[0]][0]))[0]
    return [names[best[0]][0]]
  per = {}
  for cid, t in tot.items():
    per.setdefault(names[cid][1], []).append((-t, names[cid][0]))
  return [f"{c},{min(v)[1]},{-min(v)[0]}" for c, v in sorted(per.items())]


def sql_answer(rng: random.Random, level: int) -> TaskSpec:
  cust, orders = _shop(rng, (8, 30, 80)[level], (40, 300, 1500)[level])
  month, who = f"2024-{rng.randint(1, 6):02d}", cust[0][0]
  for _ in range(20):  # make sure ignoring refunds changes the answer
    if _sql_answer(level, cust, orders, month, who) != _sql_answer(
      level, cust, orders, month, who, False
    ):
      break
    loser = rng.choice(cust[1:])[0] if level else who
    orders.append((len(orders) + 1, loser, month, "refunded", 5_000_000))
  want = _sql_answer(level, cust, orders, month, who)
  q = (
    f"the total amount_cents of paid orders of customer id {who} (a single integer)",
    f"the name of the customer with the largest total amount_cents of paid orders in month {month} "
    "(ties: alphabetically first name)",
    "for every country, the customer with the largest total amount_cents of paid orders over all "
    "months, as lines `country,name,total` sorted by country (ties: alphabetically first name)",
  )[level]
  instruction = f"""/workspace/shop.db is a SQLite database (tables customers and orders;
orders.status is `paid` or `refunded`, refunded orders do not count). Write to /workspace/answer.txt
{q}."""
  sql = (
    f"SELECT COALESCE(SUM(amount_cents), 0) FROM orders WHERE status='paid' AND customer_id={who};",
    f"SELECT c.name FROM orders o JOIN customers c ON c.id=o.customer_id WHERE o.status='paid' AND "
    f"o.month='{month}' GROUP BY c.id ORDER BY SUM(o.amount_cents) DESC, c.name LIMIT 1;",
    "WITH t AS (SELECT c.country, c.name, SUM(o.amount_cents) s FROM orders o JOIN customers c ON "
    "c.id=o.customer_id WHERE o.status='paid' GROUP BY c.id), r AS (SELECT country, name, s, "
    "ROW_NUMBER() OVER (PARTITION BY country ORDER BY s DESC, name) k FROM t) SELECT country || "
    "',' || name || ',' || s FROM r WHERE k=1 ORDER BY country;",
  )[level]
  solve = f'sqlite3 shop.db "{sql}" > answer.txt'
  wrong = f'sqlite3 shop.db "{re.sub("(o[.])?status=.paid.", "1=1", sql)}" > answer.txt'
  return TaskSpec(
    instruction,
    CHECK_ANSWER,
    solve,
    wrong,
    files={"dump.sql": _dump(cust, orders)},
    setup="sqlite3 shop.db < dump.sql && rm dump.sql",
    data={"want": want},
    language="bash",
    complexity=("short", "short", "moderate")[level],
  )


FUZZ_SQL_CHECK = """
import random, sqlite3
query = read("/workspace/query.sql")
rng = random.Random(DATA["seed"])
for trial in range(DATA["n"]):
  db = sqlite3.connect(":memory:")
  db.executescript(DATA["schema"])
  n_c = rng.randint(1, DATA["max_c"])
  for i in range(1, n_c + 1):
    db.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, f"c{rng.randint(0, 3 * n_c)}_{i}", rng.choice("ABC")))
  for j in range(rng.randint(0, DATA["max_o"])):
    db.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", (j + 1, rng.randint(1, n_c + 2),
               f"2024-0{rng.randint(1, 3)}", rng.choice(("paid", "refunded")), rng.randint(0, 1000)))
  want = db.execute(DATA["reference"]).fetchall()
  try:
    got = db.execute(query).fetchall()
  except sqlite3.Error as e:
    fail(f"query.sql failed: {e}")
  if got != want:
    fail(f"trial {trial}: {len(got)} rows, expected {len(want)}; first rows {got[:2]} vs {want[:2]}")
"""  # noqa: E501 (embedded script, kept verbatim)


def sql_fuzz_query(rng: random.Random, level: int) -> TaskSpec:
  status = rng.choice(("paid", "refunded"))
  ref = (
    "SELECT c.name, COUNT(o.id), COALESCE(SUM(o.amount_cents), 0) FROM customers c LEFT JOIN "
    f"orders o ON o.customer_id = c.id AND o.status = '{status}' GROUP BY c.id ORDER BY 3 DESC, "
    "c.name, c.id"
  )
  cust, orders = _shop(rng, 10, 40, zero_customers=2)
  instruction = f"""Write a single SQLite SELECT statement to /workspace/query.sql (schema: see
/workspace/sample.db, tables customers and orders). For EVERY customer it must return the columns
(name, number of orders with status '{status}', total amount_cents of those orders, 0 when none),
one row per customer, ordered by the total descending, then name, then customer id. Orders may
reference customer ids that do not exist; ignore them. It will be run against many other databases
with the same schema."""
  wrong_q = ref.replace("LEFT JOIN", "JOIN").replace(
    f"ON o.customer_id = c.id AND o.status = '{status}'",
    f"ON o.customer_id = c.id WHERE o.status = '{status}'",
  )
  solve = f'cat > query.sql <<"SQL"\n{ref};\nSQL'
  wrong = f'cat > query.sql <<"SQL"\n{wrong_q};\nSQL'
  data = {
    "seed": rng.randint(0, 2**31),
    "n": (20, 100, 300)[level],
    "max_c": (5, 15, 40)[level],
    "max_o": (10, 40, 150)[level],
    "schema": SCHEMA,
    "reference": ref,
  }
  return TaskSpec(
    instruction,
    FUZZ_SQL_CHECK,
    solve,
    wrong,
    files={"dump.sql": _dump(cust, orders)},
    setup="sqlite3 sample.db < dump.sql && rm dump.sql",
    data=data,
    language="bash",
  )


def jq_inventory(rng: random.Random, level: int) -> TaskSpec:
  tag = util.word(rng)
  whs, tot = [], {}
  for _ in range((2, 4, 8)[level]):
    shelves = []
    for s in range((2, 3, 6)[level]):
      items = []
      for _ in range(rng.randint(1, 5)):
        sku, qty = f"P-{rng.randint(1, 15):03d}", rng.randint(1, 50)
        tags = rng.sample(util.WORDS[:8] + (tag,), 2)
        items.append({"sku": sku, "qty": qty, "tags": tags})
        if tag in tags:
          tot[sku] = tot.get(sku, 0) + qty
      shelves.append({"id": f"S{s}", "items": items})
    shelves[-1]["items"].append({"sku": "P-999", "qty": 7, "tags": [tag]})
    tot["P-999"] = tot.get("P-999", 0) + 7
    whs.append({"name": util.word(rng), "shelves": shelves})
  want = [f"{k} {v}" for k, v in sorted(tot.items())]
  instruction = f"""/workspace/inventory.json lists warehouses, their shelves and the items on each
shelf. For every sku that appears on an item tagged `{tag}`, sum `qty` over all such tagged items in
all warehouses and shelves. Write /workspace/answer.txt with lines `<sku> <total>` sorted by sku."""
  solve = (
    f"""jq -r '[.warehouses[].shelves[].items[] | select(.tags | index("{tag}"))] """
    f"""| group_by(.sku)[] | "\\(.[0].sku) \\(map(.qty) | add)"' inventory.json > answer.txt"""
  )
  wrong = solve.replace(".shelves[]", ".shelves[0]")
  return TaskSpec(
    instruction,
    CHECK_ANSWER,
    solve,
    wrong,
    files={"inventory.json": json.dumps({"warehouses": whs}, indent=1)},
    data={"want": want},
  )


def rotated_logs(rng: random.Random, level: int) -> TaskSpec:
  comps = ["auth", "db", "api", "cache", "queue"][: (2, 3, 5)[level]]
  n_files, per = (3, 5, 8)[level], (50, 200, 600)[level]
  start, end = "2024-03-04T10:00:00", "2024-03-04T14:30:00"
  counts, files = {}, {}
  for f in range(n_files):
    lines = []
    for _ in range(per):
      h, m, s = rng.randint(6, 18), rng.randint(0, 59), rng.randint(0, 59)
      ts = f"2024-03-04T{h:02d}:{m:02d}:{s:02d}"
      lvl, comp = rng.choice(("INFO", "WARN", "ERROR")), rng.choice(comps)
      lines.append(f"{ts} {lvl} [{comp}] {util.text_blob(rng, 4).strip()}")
      if lvl == "ERROR" and start <= ts <= end:
        counts[comp] = counts.get(comp, 0) + 1
    lines.sort()
    body = "\n".join(lines) + "\n"
    name = "app.log" if f == 0 else f"app.log.{f}"
    if f >= 2:
      files[f"logs/{name}.gz"] = gzip.compress(body.encode(), mtime=0)
    else:
      files[f"logs/{name}"] = body
  want = [f"{c} {counts.get(c, 0)}" for c in sorted(comps)]
  instruction = f"""/workspace/logs holds a rotated application log (app.log, app.log.1, and older
rotations compressed as app.log.N.gz). Count the ERROR lines per component (the word in [brackets])
with a timestamp between {start} and {end} inclusive, across ALL rotations. Write
/workspace/answer.txt with lines `<component> <count>` for each of: {", ".join(sorted(comps))}
(sorted by component, count 0 if none)."""
  solve = f"""for c in {" ".join(sorted(comps))}; do
  n=$(zcat -f logs/* | awk -v c="[$c]" '$2=="ERROR" && $3==c && $1>="{start}" && $1<="{end}"' | wc -l)
  echo "$c $n"
done > answer.txt"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = solve.replace("zcat -f logs/*", "cat logs/app.log logs/app.log.1")
  return TaskSpec(
    instruction,
    CHECK_ANSWER,
    solve,
    wrong,
    files=files,
    data={"want": want},
    complexity=("short", "moderate", "moderate")[level],
  )


FAMILIES = (
  Family("sql_answer", "data_querying", "exact_text", "text_only", sql_answer, ("sql",)),
  Family(
    "sql_fuzz_query", "data_querying", "fuzz_equivalence", "text_only", sql_fuzz_query, ("sql",)
  ),
  Family("jq_inventory", "data_querying", "exact_text", "text_only", jq_inventory, ("jq",)),
  Family("rotated_logs", "data_querying", "exact_text", "text_only", rotated_logs, ("zcat", "awk")),
)
