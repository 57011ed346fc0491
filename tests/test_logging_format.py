"""`log_format` (docs/configuration.md): text or one JSON object a line, with syslog
priority prefixes when stderr is the journal (systemd's JOURNAL_STREAM), secrets redacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = """
import logging
from daemon.runtime.main import setup_logging
setup_logging("info", {fmt!r})
logging.getLogger("commonroom.test").warning("hello %s", "world")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("commonroom.test").exception("boom at /oauth/callback?code=s3cr3tc0de&state=xyz")
logging.getLogger("commonroom.test").debug("not shown at info")
"""


def run(tmp_path: Path, fmt: str, journal: bool) -> list[str]:
    out = tmp_path / f"{fmt}-{journal}.log"
    with out.open("wb") as f:
        st = os.fstat(f.fileno())
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        if journal:
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        subprocess.run([sys.executable, "-c", SCRIPT.format(fmt=fmt)], stderr=f, cwd=REPO, env=env,
                       check=True, timeout=60)
    return out.read_text().splitlines()


def test_json_lines_carry_level_logger_request_id_and_the_exception(tmp_path: Path) -> None:
    lines = run(tmp_path, "json", journal=False)
    records = [json.loads(line) for line in lines]
    assert [r["level"] for r in records] == ["warning", "error"]
    first, second = records
    assert first["message"] == "hello world" and first["logger"] == "commonroom.test"
    assert first["requestId"] == "-" and first["time"].endswith("Z")
    assert "ZeroDivisionError" in second["exception"]
    assert "s3cr3tc0de" not in lines[1] and "code=" in second["message"]


def test_under_systemd_every_line_starts_with_its_priority(tmp_path: Path) -> None:
    text = run(tmp_path, "text", journal=True)
    assert text[0].startswith("<4>") and "hello world" in text[0]
    assert text[1].startswith("<3>") and all(line.startswith("<3>") for line in text[1:])  # the traceback too
    as_json = run(tmp_path, "json", journal=True)
    assert as_json[0].startswith("<4>{") and json.loads(as_json[0][3:])["message"] == "hello world"
    plain = run(tmp_path, "text", journal=False)
    assert not plain[0].startswith("<")
