"""PostgreSQL connections as the store uses them: statements written with ``?``
placeholders translated to psycopg's (lists in ``IN (...)`` bound as one array), text escaped
where PostgreSQL cannot hold it (NUL), loaders for the types the store reads back, and a
connection that can send a batch of statements in one round trip (a pipeline)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "PgConnection",
    "bind",
    "escape_text",
    "prepare",
    "redact_url",
    "run",
    "translate",
    "unescape_text",
]


@lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """A statement with ``?`` placeholders in psycopg's style: ``?`` outside quotes becomes
    ``%s`` and every ``%`` is doubled (the statement always goes with a parameter list)."""
    out: list[str] = []
    quote = ""
    for ch in sql:
        if ch == "%":
            out.append("%%")
        elif quote:
            out.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


#: ``IN (%s, %s, ...)`` of two or more placeholders (``%s`` not after another ``%``).
_IN_LIST = re.compile(r"\b(NOT\s+)?IN\s*\(\s*(?<!%)%s(?:\s*,\s*(?<!%)%s)+\s*\)", re.I)
_MARK = re.compile(r"(?<!%)%s")


@lru_cache(maxsize=4096)
def prepare(sql: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """*sql* as psycopg takes it (:func:`translate`), with every list of two or more
    placeholders, ``IN (?, ?, ...)``, made one array parameter: ``= ANY(%s)`` (``NOT IN``:
    ``<> ALL(%s)``). The same statement then reads the same whatever the list's length, so
    psycopg parses it once and may prepare it (it parses a statement of more than 50
    parameters again on every call), and the server gets one parameter, not hundreds.
    Returns the statement and, for each list, the index of its first parameter and how many
    it had (see :func:`bind`)."""
    text = translate(sql)
    groups: list[tuple[int, int]] = []
    out: list[str] = []
    at = 0
    for found in _IN_LIST.finditer(text):
        first = len(_MARK.findall(text, 0, found.start()))
        groups.append((first, len(_MARK.findall(found.group(0)))))
        out.append(text[at : found.start()])
        out.append("<> ALL(%s)" if found.group(1) else "= ANY(%s)")
        at = found.end()
    out.append(text[at:])
    return "".join(out), tuple(groups)


def bind(params: Sequence[Any], groups: tuple[tuple[int, int], ...]) -> list[Any]:
    """*params* for a statement of :func:`prepare`: each list's values as one list, every text
    as stored (:func:`escape_text`)."""
    values = _params(params)
    if not groups:
        return values
    out: list[Any] = []
    at = 0
    for first, count in groups:
        out.extend(values[at:first])
        out.append(values[first : first + count])
        at = first + count
    out.extend(values[at:])
    return out


def run(raw: psycopg.Connection[Any], sql: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
    """Execute the store's ``?`` statement *sql* on *raw*."""
    text, groups = prepare(sql)
    return raw.execute(text, bind(params, groups))


def redact_url(url: str) -> str:
    """*url* with its password replaced by ``***`` (for messages and reports)."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


#: PostgreSQL text cannot hold NUL, which messages may: it is stored as ``ESC + "0"`` and
#: ``ESC`` itself as ``ESC + ESC`` (a private-use character), and read back exactly.
ESC = "\ue000"
_UNESCAPE = re.compile(ESC + "(.)", re.S)


def escape_text(text: str) -> str:
    """*text* as stored in PostgreSQL (no NUL; reversible with :func:`unescape_text`)."""
    if "\x00" not in text and ESC not in text:
        return text
    return text.replace(ESC, ESC + ESC).replace("\x00", ESC + "0")


def unescape_text(text: str) -> str:
    """What :func:`escape_text` stored, as it was given."""
    if ESC not in text:
        return text
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), text)


def _params(params: Sequence[Any]) -> list[Any]:
    return [escape_text(p) if isinstance(p, str) else p for p in params]


def _configure(raw: psycopg.Connection[Any]) -> None:
    """Load ``numeric`` as the Python number it is (sums of integer columns are numeric in
    PostgreSQL; SQLite returns ints, and callers expect them), and text as it was given."""
    from psycopg.adapt import Loader
    from psycopg.types.string import TextLoader

    class NumberLoader(Loader):
        def load(self, data: Any) -> int | float:
            text = bytes(data).decode()
            return float(text) if any(c in text for c in ".eEN") else int(text)

    class ExactTextLoader(TextLoader):
        def load(self, data: Any) -> str:
            text = super().load(data)
            return unescape_text(text if isinstance(text, str) else text.decode())

    # Plans for the values given: prepared statements (psycopg prepares a query it sees
    # often) would otherwise switch to a generic plan that cannot tell a rare word from a
    # common one, and walk every row for a word in twenty.
    raw.execute("SET plan_cache_mode = force_custom_plan")
    # Every statement the store runs is short: compiling one (JIT, for a plan whose estimate
    # passes jit_above_cost: a search over a million rows) costs more than running it.
    raw.execute("SET jit = off")
    # Nor parallel workers: starting them costs tens of milliseconds, more than the scans
    # they would share (a bounded search of the newest 20,000 rows: 82 ms with them, 25
    # without).
    raw.execute("SET max_parallel_workers_per_gather = 0")
    raw.adapters.register_loader("numeric", NumberLoader)
    for name in ("text", "varchar"):
        raw.adapters.register_loader(name, ExactTextLoader)


class _Pending:
    """A cursor of a statement sent in pipeline mode: its rows are read as any cursor's (that
    waits for them), and its row count waits for the statement's result too."""

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        self._pipeline.sync()
        return int(self._cursor.rowcount)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> Any:
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)


class PgConnection:
    """A pooled psycopg connection that takes the store's ``?`` statements."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        #: The pipeline the connection's statements go through, if it is in pipeline mode.
        self.pipeline: psycopg.Pipeline | None = None
        #: How many savepoints of the store's own are open (0: a write is its transaction).
        self.savepoints = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = run(self.raw, sql, params)
        return cursor if self.pipeline is None else _Pending(cursor, self.pipeline)

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """Pipeline mode for the block (nothing more when the connection is in it already:
        leaving a nested pipeline would wait for every result sent so far)."""
        if self.pipeline is not None:
            yield
            return
        with self.raw.pipeline() as self.pipeline:
            try:
                yield
            finally:
                self.pipeline = None

    @contextlib.contextmanager
    def in_one_round_trip(self) -> Iterator[None]:
        """A transaction in pipeline mode: a statement whose result is not read yet (an
        insert, an update) goes out with the next one, BEGIN with the first and COMMIT
        with the last, so the server is waited for only where a result is read, and once
        at the end. (psycopg's own ``transaction()`` in pipeline mode waits for the block's
        results before it sends COMMIT: a second wait.) Begun and ended here, on a
        connection in autocommit mode; whatever goes wrong, what was sent is rolled back."""
        import psycopg

        committed = False
        try:
            with self.pipelined():
                try:
                    self.raw.execute("BEGIN")
                    yield
                    self.raw.execute("COMMIT")
                except BaseException:
                    # A statement's error came back inside the block: take the pipeline out
                    # of its aborted state here, or leaving it would fail again over the
                    # error being raised (psycopg logs a warning for that).
                    if self.pipeline is not None:
                        with contextlib.suppress(psycopg.Error):
                            self.pipeline.sync()
                    raise
            committed = True
        finally:
            if not committed and not self.raw.closed:
                # A failed statement left the transaction aborted, or the block raised
                # with it open (what the server did with it is undone).
                with contextlib.suppress(psycopg.Error):
                    self.raw.execute("ROLLBACK")

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        rows = list(rows)
        if rows:
            cur.executemany(translate(sql), [_params(r) for r in rows])
        return cur
