"""Fast unit tests: output capture and truncation, the sentinel reader, spec validation, the bwrap
mount plan, image hashing and mirror detection (no sandbox started)."""

from __future__ import annotations

import os
import time

import pytest

from tmax_jax.sandbox import base, shell
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError
from tmax_jax.sandbox.backends import bubblewrap
from tmax_jax.sandbox.images import base_rootfs


def test_truncate_keeps_head_and_tail_with_a_note():
  text = "".join(f"{i}\n" for i in range(10_000))
  out = shell.truncate(text, 1000)
  assert out.startswith("0\n1\n") and out.endswith("9998\n9999\n")
  assert f"{len(text)} characters in total" in out
  assert shell.truncate("short", 1000) == "short"


def test_output_capture_is_bounded_and_decodes_invalid_utf8():
  cap = shell.OutputCapture(keep=100)
  for i in range(10_000):
    cap.add(b"x" * 97 + b"\xff\n" + str(i).encode())
  assert len(cap.head) == 100 and len(cap.tail) <= 200
  text = cap.text(120)
  assert "\ufffd" in text and text.endswith("9999") and "bytes in total" in text


def test_sentinel_reader_splits_output_and_keeps_what_follows():
  r, w = os.pipe()
  token = b"tok123"
  os.write(w, b"hello\nworld" + b"\n" + token + b" 5 2 done\nlate bg output")
  reader = shell.SentinelReader(r, token)
  cap = shell.OutputCapture(1000)
  assert reader.read_until(5, cap, time.monotonic() + 5) == ("done", 2, "done")
  assert bytes(cap.head) == b"hello\nworld" and reader.pending == b"late bg output"
  os.write(w, b"\n" + token + b" 6 0 done\n")
  cap2 = shell.OutputCapture(1000)
  assert reader.read_until(6, cap2, time.monotonic() + 5) == ("done", 0, "done")
  assert bytes(cap2.head) == b"late bg output"
  assert reader.read_until(7, shell.OutputCapture(10), time.monotonic() + 0.2)[0] == "deadline"
  os.close(w)
  assert reader.read_until(7, shell.OutputCapture(10), time.monotonic() + 5)[0] == "eof"
  os.close(r)


def test_sentinel_reader_finds_a_marker_split_across_reads():
  r, w = os.pipe()
  reader = shell.SentinelReader(r, b"TOKEN")
  os.write(w, b"a" * 5000 + b"\nTOK")
  cap = shell.OutputCapture(100_000)
  import threading

  threading.Timer(0.2, lambda: os.write(w, b"EN 1 0 done\n")).start()
  assert reader.read_until(1, cap, time.monotonic() + 5) == ("done", 0, "done")
  assert bytes(cap.head) == b"a" * 5000
  os.close(w)
  os.close(r)


@pytest.mark.parametrize(
  "kw,match",
  [
    ({"image": ""}, "image"),
    ({"image": "x", "workdir": "/"}, "workdir"),
    ({"image": "x", "files": (("a",),)}, r"files\[0\]"),
    ({"image": "x", "setup_commands": (3,)}, r"setup_commands\[0\]"),
    ({"image": "x", "env": (("1X", "v"),)}, r"env\[0\]"),
  ],
)
def test_validate_spec_names_the_field(kw, match):
  with pytest.raises(SandboxError, match=match):
    base.validate_spec(EnvironmentSpec(**kw))


def test_mount_plan_mirrors_dirs_that_hold_binds(tmp_path):
  for d in ("usr/bin", "etc", "opt/tool", "proc", "tmp", "home/agent"):
    (tmp_path / d).mkdir(parents=True)
  (tmp_path / "bin").symlink_to("usr/bin")
  plan = bubblewrap.mount_plan(tmp_path, ["/workspace", "/opt/app", "/tmp", "/home/agent"])
  assert plan[plan.index("/bin") - 2 : plan.index("/bin") + 1] == ["--symlink", "usr/bin", "/bin"]
  assert plan[plan.index(str(tmp_path / "usr")) - 1] == "--ro-bind"
  assert plan[plan.index("/opt") - 1] == "--dir" and str(tmp_path / "opt" / "tool") in plan
  assert "/proc" not in plan and "/tmp" not in plan and "/home/agent" not in plan


def test_definition_hash_changes_with_the_package_list(tmp_path, monkeypatch):
  for name in base_rootfs.DEFINITION_FILES:
    (tmp_path / name).write_text((base_rootfs.sandbox_dir() / name).read_text())
  monkeypatch.setenv("TMAX_SANDBOX_DIR", str(tmp_path))
  first = base_rootfs.definition_hash()
  assert first == base_rootfs.definition_hash(base_rootfs.sandbox_dir()) and len(first) == 16
  with open(tmp_path / "packages.txt", "a") as f:
    f.write("htop\n")
  assert base_rootfs.definition_hash() != first
  (tmp_path / "build_rootfs.sh").unlink()
  with pytest.raises(SandboxError, match="build_rootfs.sh"):
    base_rootfs.definition_hash()


def test_base_def_installs_the_shared_package_list():
  text = (base_rootfs.sandbox_dir() / "base.def").read_text()
  assert "sandbox/packages.txt /opt/tmax/packages.txt" in text and "/opt/tmax/packages.txt)" in text
  pkgs = base_rootfs.read_packages()
  for needed in (
    "python3",
    "python3-pytest",
    "git",
    "build-essential",
    "sqlite3",
    "tesseract-ocr",
    "ffmpeg",
    "curl",
    "jq",
  ):
    assert needed in pkgs


def test_detect_mirror_reads_deb822_and_one_line_sources(tmp_path):
  (tmp_path / "sources.list.d").mkdir()
  (tmp_path / "sources.list.d" / "debian.sources").write_text(
    "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
    "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
  )
  assert base_rootfs.detect_mirror(tmp_path) == "http://mirror.example/debian"
  (tmp_path / "sources.list.d" / "debian.sources").unlink()
  (tmp_path / "sources.list").write_text(
    "deb [arch=amd64] http://other.example/debian bookworm main\n"
  )
  assert base_rootfs.detect_mirror(tmp_path) == "http://other.example/debian"
  (tmp_path / "sources.list").unlink()
  assert base_rootfs.detect_mirror(tmp_path) == base_rootfs.DEFAULT_MIRROR


def test_ensure_base_rootfs_is_cached(rootfs):
  start = time.monotonic()
  assert base_rootfs.ensure_base_rootfs(quiet=True) == rootfs
  assert time.monotonic() - start < 1.0 and base_rootfs.is_built(rootfs)
  assert rootfs.name == base_rootfs.definition_hash()
  assert (rootfs / "usr/bin/python3").exists() and (rootfs / "usr/bin/tesseract").exists()
