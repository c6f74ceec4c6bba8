"""hermes-lcm as ``peers.py`` drives it: its modules loaded from a checkout (with a stand-in for
Hermes Agent's base class when Hermes is not installed), its summary call answered by the
benchmark's summarizer, and the host's side of it (Hermes's working list over one engine).

Only ``peers.py`` uses this module; it is apart so that each file holds one side.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any, cast

from turn import BUDGET

SESSION = "host"
#: The model name both engines send to the model server.
MODEL = "bench-model"
SYSTEM = {"role": "system", "content": "You are a careful coding assistant."}


# --- loading hermes-lcm ------------------------------------------------------------------------


class _ContextEngineStandIn:
    """What hermes-lcm needs of Hermes Agent's ``ContextEngine`` base class."""

    last_prompt_tokens = 0
    last_completion_tokens = 0
    last_total_tokens = 0
    compression_count = 0
    threshold_tokens = 0
    context_length = 0

    def on_session_reset(self) -> None:
        self.last_prompt_tokens = self.last_completion_tokens = self.last_total_tokens = 0
        self.compression_count = 0

    def get_status(self) -> dict[str, Any]:
        return {"compression_count": self.compression_count}


def _ensure_context_engine() -> str:
    """Hermes Agent's base class, or the stand-in; which one."""
    try:
        importlib.import_module("agent.context_engine")
        return "Hermes Agent's agent.context_engine"
    except ImportError:
        pass
    package = types.ModuleType("agent")
    package.__path__ = []
    module = types.ModuleType("agent.context_engine")
    module.ContextEngine = _ContextEngineStandIn  # type: ignore[attr-defined]
    package.context_engine = module  # type: ignore[attr-defined]
    sys.modules["agent"] = package
    sys.modules["agent.context_engine"] = module
    return "a stand-in base class (Hermes Agent not installed)"


class HermesLcm:
    """hermes-lcm's modules, loaded from a checkout as the package ``hermes_lcm`` (its
    ``__init__`` registers with a Hermes host, so it is not run), with the instant summarizer
    in place of the Hermes auxiliary model (or, after :meth:`use_model`, a model server)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = _ensure_context_engine()
        package = types.ModuleType("hermes_lcm")
        package.__path__ = [str(path)]
        package.__package__ = "hermes_lcm"
        sys.modules["hermes_lcm"] = package
        self.engine: Any = cast(Any, importlib.import_module("hermes_lcm.engine"))
        self.config: Any = cast(Any, importlib.import_module("hermes_lcm.config"))
        self.tokens: Any = cast(Any, importlib.import_module("hermes_lcm.tokens"))
        self.escalation: Any = cast(Any, importlib.import_module("hermes_lcm.escalation"))
        self.tokens._encoder_checked = True  # no tiktoken: a plain Hermes install has none
        self.tokens._encoder = None
        self.calls = 0
        #: The model calls that failed (their error), since :meth:`use_model`.
        self.failures: list[str] = []
        self._client: Any = None
        self.escalation._call_llm_for_summary = self._instant
        #: hermes-lcm's summaries by the escalation level that wrote them (1: the detailed
        #: prompt, 2: the bullet points, 3: its deterministic truncation, no model).
        self.levels: Counter[int] = Counter()
        summarize = self.engine.summarize_with_escalation

        def counted(*args: Any, **kwargs: Any) -> Any:
            text, level = summarize(*args, **kwargs)
            self.levels[level] += 1
            return text, level

        self.engine.summarize_with_escalation = counted
        self.version = self._version()

    def _instant(
        self, prompt: str, max_tokens: int, model: str = "", timeout: float | None = None
    ) -> str:
        # hermes-lcm asks for twice its target (max_tokens = budget * 2): answer the target
        self.calls += 1
        target = max(1, max_tokens // 2)
        return ("summary " * (target // 2))[: target * 4]

    def _from_model(
        self, prompt: str, max_tokens: int, model: str = "", timeout: float | None = None
    ) -> str | None:
        """What Hermes's auxiliary client does for hermes-lcm (``call_llm(task="compression",
        ...)``): one Chat Completions request with the prompt as the user message; on an error
        ``None``, as hermes-lcm's own function returns, and its escalation goes on."""
        self.calls += 1
        try:
            response = self._client.chat.completions.create(
                model=model or MODEL,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.3,
                max_tokens=max_tokens,
                timeout=timeout,
            )
        except Exception as exc:  # noqa: BLE001 - hermes-lcm's own call swallows every error
            self.failures.append(f"{type(exc).__name__}: {exc}")
            return None
        content = response.choices[0].message.content
        return (content if isinstance(content, str) else str(content or "")).strip()

    def use_model(self, base_url: str | None) -> None:
        """Summaries from the OpenAI-compatible server at *base_url* (``.../v1``), one
        attempt each (the SDK's retries off); ``None``: the instant answer again."""
        if base_url is None:
            self._client = None
            self.escalation._call_llm_for_summary = self._instant
            return
        import openai

        self._client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
        self.failures = []
        self.escalation._call_llm_for_summary = self._from_model

    def _version(self) -> str:
        commit = ""
        with contextlib.suppress(OSError):
            commit = subprocess.run(
                ["git", "-C", str(self.path), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        found = re.search(r"^version:\s*(\S+)", (self.path / "plugin.yaml").read_text(), re.M)
        return f"{found.group(1) if found else '?'} ({commit[:12] or 'not a git checkout'})"

    def open(self, db: Path, *, context_length: int = BUDGET) -> Any:
        """An engine on *db* bound to the session, as Hermes starts one for a model with a
        window of *context_length* tokens."""
        config = self.config.LCMConfig(database_path=str(db))
        engine = self.engine.LCMEngine(config=config, hermes_home=str(db.parent / "home"))
        engine.on_session_start(SESSION, platform="cli", context_length=context_length)
        return engine


def load_hermes_lcm(path: str | None) -> HermesLcm | str:
    """The loaded hermes-lcm, or why not."""
    if not path:
        return "no --hermes-lcm PATH given (a checkout of hermes-lcm)"
    root = Path(path).expanduser().resolve()
    missing = [
        f for f in ("engine.py", "store.py", "tools.py", "plugin.yaml") if not (root / f).exists()
    ]
    if missing:
        return f"{root} holds no hermes-lcm checkout (missing {', '.join(missing)})"
    try:
        return HermesLcm(root)
    except Exception as exc:  # noqa: BLE001 - any failure to import is a reason to skip
        return f"hermes-lcm at {root} cannot be imported: {type(exc).__name__}: {exc}"


# --- the host's side of hermes-lcm --------------------------------------------------------------


class HermesHost:
    """Hermes's working list of messages over one hermes-lcm engine."""

    def __init__(self, peer: HermesLcm, db: Path, window: int = BUDGET) -> None:
        self.peer = peer
        self.engine = peer.open(db, context_length=window)
        self.compressions = 0
        self.messages: list[dict[str, Any]] = [dict(SYSTEM)]
        self.tokens = self.count(self.messages)

    def count(self, messages: list[dict[str, Any]]) -> int:
        return int(self.peer.tokens.count_messages_tokens(messages))

    def ingest(self, new: list[dict[str, Any]]) -> None:
        """The store takes what the host's list gained (what every hook does first)."""
        self.messages.extend(dict(m) for m in new)
        self.engine._ingest_messages(self.messages)

    def compress_fully(self) -> int:
        """``compress`` until it no longer shortens the list; the calls made."""
        calls = 0
        while True:
            before = len(self.messages)
            self.messages = self.engine.compress(self.messages, current_tokens=self.tokens)
            self.tokens = self.count(self.messages)
            calls += 1
            if len(self.messages) >= before:
                return calls

    def turn(self, pair: list[dict[str, Any]]) -> None:
        """One turn as Hermes drives the engine; the host's running token estimate (Hermes
        keeps one too) is in the time, two messages' worth or the compressed list's."""
        self.messages.extend(dict(m) for m in pair)
        self.tokens += self.count(pair)
        fire = self.engine.should_compress_preflight(self.messages)
        self.engine.update_from_response({"prompt_tokens": self.tokens})
        if fire or self.engine.should_compress(self.tokens):
            self.compressions += 1
            self.messages = self.engine.compress(self.messages, current_tokens=self.tokens)
            self.tokens = self.count(self.messages)

    def search(self, query: str) -> str:
        out: str = self.engine.handle_tool_call(
            "lcm_grep", {"query": query}, messages=self.messages
        )
        return out

    def assemble(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.engine._assemble_context(
            self.messages[0], self.messages[1:]
        )
        return out

    def lost_lineage(self) -> tuple[int, int]:
        """Leaf summaries recording no source message, and all leaf summaries."""
        rows = self.engine._dag._conn.execute(
            "SELECT source_ids FROM summary_nodes WHERE source_type = 'messages'"
        ).fetchall()
        return sum(1 for (ids,) in rows if ids in ("[]", "")), len(rows)

    def close(self) -> None:
        self.engine.shutdown()
