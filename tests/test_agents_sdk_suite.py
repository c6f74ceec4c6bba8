"""The OpenAI Agents SDK's own session tests, run against :class:`LosslessSession`.

The SDK publishes tests for its ``Session`` interface (``tests/memory/test_session.py`` and
``test_session_limit.py``). They are downloaded from PyPI at the installed SDK version (never
copied into this repository), laid out with the few helpers they import, and run unmodified
in a child pytest whose root conftest (``support/agents_sdk/sdk_conftest.py``) answers every
``SQLiteSession(...)`` with a LosslessSession over a real lossless store. Tests of
SQLiteSession's own machinery are skipped there, each with its reason.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")

from host_packages import pypi_sdist

SUPPORT = Path(__file__).parent / "support" / "agents_sdk"
#: What the two test files import from the SDK's test package.
HELPERS = ("__init__.py", "conftest.py", "testing_processor.py", "test_responses.py")
FILES = ("memory/test_session.py", "memory/test_session_limit.py")


def test_the_agents_sdks_own_session_tests_pass_against_lossless(tmp_path: Path) -> None:
    version = importlib.metadata.version("openai-agents")
    source = pypi_sdist("openai-agents", version) / "tests"
    build = tmp_path / "sdk"
    (build / "tests" / "memory").mkdir(parents=True)
    for name in (*HELPERS, *FILES):
        shutil.copy(source / name, build / "tests" / name)
    shutil.copy(SUPPORT / "sdk_conftest.py", build / "conftest.py")
    shutil.copy(SUPPORT / "shim.py", build / "lossless_sqlite_shim.py")
    (build / "pytest.ini").write_text(
        "[pytest]\ntimeout = 120\nmarkers =\n"
        "    allow_call_model_methods: the SDK's marker\n"
        "    requires_native_macos_sandbox: the SDK's marker\n"
        "    review_optional: the SDK's marker\n"
        "    serial: the SDK's marker\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOSSLESS_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs"]
        + [f"tests/{name}" for name in FILES],
        cwd=build,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout + done.stderr
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|error)", out)}
    assert done.returncode == 0, out[-6000:]
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, out[-6000:]
    # Every test of the Session protocol ran and passed; only SQLiteSession internals skip.
    assert counts.get("passed", 0) >= 50, out[-3000:]
    assert counts.get("skipped", 0) <= 18, out[-3000:]
