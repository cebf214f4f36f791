"""Every examples/*.py (the README's examples) runs against the live server and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLIENT_DIR

EXAMPLES = sorted((CLIENT_DIR / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"allocate_pod.py", "rejection_reasons.py", "invalid_annotation.py"}


def test_readme_shows_every_example() -> None:
    readme = (CLIENT_DIR / "README.md").read_text()
    for p in EXAMPLES:
        assert f"examples/{p.name}" in readme, f"README.md does not mention examples/{p.name}"


@pytest.mark.server
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(example: Path, address: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(example), "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CLIENT_DIR,
    )
    print(proc.stdout)
    assert proc.returncode == 0, f"{example.name} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip()
