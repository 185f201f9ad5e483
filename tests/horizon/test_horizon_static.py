"""The static audit's rules on hand-made before/after snapshots (no sandbox), and the snapshot
script itself on a real directory."""

import hashlib
import json
import subprocess
import sys

from tmax_jax.horizon import static

STUB = '''import csv


def totals(path):
  """Sum per region."""
  raise NotImplementedError


def main():
  print(totals("sales.csv"))
'''
IMPL = '''import csv


def totals(path):
  """Sum per region."""
  out = {}
  for row in csv.DictReader(open(path)):
    out[row["region"]] = out.get(row["region"], 0) + float(row["amount"])
  return {k: round(v, 2) for k, v in out.items()}


def main():
  print(totals("sales.csv"))
'''


def entry(text, mtime=1):
  data = text.encode()
  return {
    "sha256": hashlib.sha256(data).hexdigest(),
    "size": len(data),
    "mtime_ns": mtime,
    "text": text,
  }


def rules(findings):
  return [(f.rule, f.path, f.symbol) for f in findings]


def test_implementing_a_stub_is_clean():
  before = {"report.py": entry(STUB)}
  assert static.static_audit(before, {"report.py": entry(IMPL, 2)}) == []


def test_function_already_implemented_is_named():
  before = {"report.py": entry(IMPL.replace("round(v, 2)", "round(v, 1)"))}
  found = static.static_audit(before, {"report.py": entry(IMPL, 2)})
  assert rules(found) == [("function_exists", "report.py", "totals")]
  assert "totals" in found[0].evidence and "differs in 1 line" in found[0].evidence


def test_copy_of_an_existing_implementation_into_a_new_file_is_named():
  before = {"lib/reference.py": entry(IMPL), "report.py": entry(STUB)}
  after = {**before, "solution.py": entry(IMPL, 3)}
  found = static.static_audit(before, after)
  assert rules(found) == [("function_exists", "solution.py", "totals")]
  assert "lib/reference.py" in found[0].evidence


def test_small_edits_next_to_real_new_work_are_an_extension_not_pre_done():
  ext = IMPL.replace(
    '    out[row["region"]]', '    if row.get("void"):\n      continue\n    out[row["region"]]'
  )
  ext += "\n\ndef monthly(path):\n" + "".join(f"  x{i} = {i}\n" for i in range(8)) + "  return x0\n"
  found = static.static_audit({"report.py": entry(IMPL)}, {"report.py": entry(ext, 2)})
  assert found == []


def test_identical_rewrite_is_named_and_small_files_ignored():
  conf = "server {\n  listen 8080;\n  root /srv/www;\n}\n"
  before = {"etc/app.conf": entry(conf), "flag": entry("ok\n")}
  after = {"etc/app.conf": entry(conf, 5), "flag": entry("ok\n", 5), "new.txt": entry("hello\n", 5)}
  found = static.static_audit(before, after)
  assert rules(found) == [("rewrite_same_content", "etc/app.conf", "")]
  assert "etc/app.conf" in found[0].evidence
  # unchanged mtime = the oracle never wrote it
  assert static.static_audit(before, {**after, "etc/app.conf": entry(conf)}) == []


def test_line_overlap_of_other_code():
  ref = (
    "#!/bin/bash\nset -e\nfor f in data/*.csv; do\n"
    '  sort -u "$f" > "out/$(basename $f)"\n'
    '  gzip -9 "out/$(basename $f)"\ndone\necho archived\n'
  )
  before = {"tools/archive_ref.sh": entry(ref), "archive.sh": entry("#!/bin/bash\n# TODO\n")}
  found = static.static_audit(before, {**before, "archive.sh": entry(ref, 2)})
  assert rules(found) == [("line_overlap", "archive.sh", "")]
  assert "tools/archive_ref.sh" in found[0].evidence and "100%" in found[0].evidence
  own = (
    '#!/bin/bash\nset -e\nmkdir -p out\nfor f in data/*.csv; do\n  cut -d, -f2 "$f" | '
    'sort -n > "out/$f"\ndone\npaste out/* > merged.txt\nwc -l merged.txt\n'
  )
  assert static.static_audit(before, {**before, "archive.sh": entry(own, 2)}) == []


def test_data_outputs_are_not_line_compared():
  data = "".join(f"line {i}\n" for i in range(20))
  before = {"input.txt": entry(data)}
  assert static.static_audit(before, {**before, "answer.txt": entry(data, 2)}) == []


def test_trivial_bodies():
  src = (
    "def a():\n  pass\n\ndef b():\n  '''doc'''\n  ...\n\ndef c():\n  raise "
    "NotImplementedError('x')\n\ndef d():\n  return 0\n\ndef e(x):\n  return x + 1\n\n"
    "class K:\n  def m(self):\n    return self.v * 2\n"
  )
  fns = static.python_functions(src)
  assert {n: f.trivial for n, f in fns.items()} == {
    "a": True,
    "b": True,
    "c": True,
    "d": True,
    "e": False,
    "K.m": False,
  }
  assert static.python_functions("def broken(:\n") is None


def test_snapshot_script(tmp_path):
  (tmp_path / "w" / "sub").mkdir(parents=True)
  (tmp_path / "w" / "sub" / "a.py").write_text("x = 1\n")
  (tmp_path / "w" / "bin").write_bytes(b"\xff\xfe\x00")
  (tmp_path / "w" / ".git").mkdir()
  (tmp_path / "w" / ".git" / "HEAD").write_text("ref\n")
  (tmp_path / "w" / "link").symlink_to("sub/a.py")
  out = tmp_path / "snap.json"
  subprocess.run(
    [sys.executable, "-c", static.SNAPSHOT_PY, str(tmp_path / "w"), str(out), "100"], check=True
  )
  snap = json.loads(out.read_text())
  assert sorted(snap) == ["bin", "link", "sub/a.py"]
  assert snap["sub/a.py"]["text"] == "x = 1\n" and "text" not in snap["bin"]
  assert snap["link"] == {"link": "sub/a.py"}
  assert snap["bin"]["sha256"] == hashlib.sha256(b"\xff\xfe\x00").hexdigest()
