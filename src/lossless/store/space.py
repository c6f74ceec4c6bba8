"""Where a store's bytes are: each table and index (from SQLite's ``dbstat`` or PostgreSQL's
catalog), each conversation's text, and the text each day brought (``lossless stats
--space``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Store

__all__ = ["Space", "StoredObject", "space_of"]

#: The shadow tables SQLite's FTS5 keeps for a full-text index ``X`` (``X_data``, ...).
_FTS_SHADOWS = ("_data", "_idx", "_docsize", "_config", "_content")


@dataclass(frozen=True)
class StoredObject:
    """One table or index and the bytes it takes."""

    name: str
    #: ``table``, ``index`` or ``search index`` (a full-text index with its shadow tables).
    kind: str
    #: The table it belongs to (a table's own name; a search index's own name).
    table: str
    bytes: int


@dataclass(frozen=True)
class Space:
    """Where a store's bytes are."""

    #: Every table and index, the largest first.
    objects: list[StoredObject]
    #: The conversations holding the most: (conversation id, session id, messages, bytes of
    #: the messages (their text, envelopes and metadata), of their parts (the blocks of
    #: structured messages), of their summaries), the most first.
    conversations: list[tuple[int, str, int, int, int, int]]
    #: The last days with messages: (day, messages, bytes of the messages), the newest first
    #: (a message's day is its own time, as the host recorded it).
    days: list[tuple[str, int, int]]

    def total(self) -> int:
        return sum(o.bytes for o in self.objects)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.total(),
            "objects": [asdict(o) for o in self.objects],
            "conversations": [
                {
                    "conversation_id": c,
                    "session_id": s,
                    "messages": n,
                    "message_bytes": mb,
                    "part_bytes": pb,
                    "summary_bytes": sb,
                }
                for c, s, n, mb, pb, sb in self.conversations
            ],
            "days": [{"day": d, "messages": n, "bytes": b} for d, n, b in self.days],
        }


def space_of(store: Store, *, top: int = 10, days: int = 14) -> Space:
    """Where *store*'s bytes are: its objects, its *top* conversations by text, its last
    *days* days with messages."""
    objects = _postgres_objects(store) if store.backend == "postgresql" else _sqlite_objects(store)
    size = "octet_length({})" if store.backend == "postgresql" else "length(CAST({} AS BLOB))"

    def text(column: str) -> str:
        return f"coalesce({size.format(column)}, 0)"

    message_bytes = " + ".join(
        text(f"m.{c}") for c in ("content", "envelope", "metadata", "host_meta")
    )
    conversations = store.fetchall(
        "SELECT c.conversation_id, c.session_id, t.messages, t.bytes, coalesce(p.bytes, 0),"
        " coalesce(s.bytes, 0)"
        f" FROM (SELECT m.conversation_id, count(*) AS messages, sum({message_bytes}) AS bytes"
        "  FROM messages m GROUP BY m.conversation_id) t"
        " JOIN conversations c ON c.conversation_id = t.conversation_id"
        f" LEFT JOIN (SELECT m.conversation_id, sum({text('p.text')}) AS bytes"
        "  FROM message_parts p JOIN messages m ON m.message_id = p.message_id"
        "  GROUP BY m.conversation_id) p ON p.conversation_id = t.conversation_id"
        f" LEFT JOIN (SELECT conversation_id, sum({text('content')}) AS bytes FROM summaries"
        "  GROUP BY conversation_id) s ON s.conversation_id = t.conversation_id"
        " ORDER BY 4 DESC, 1 LIMIT ?",
        [top],
    )
    by_day = store.fetchall(
        f"SELECT substr(m.created_at, 1, 10), count(*), sum({message_bytes}) FROM messages m"
        " GROUP BY 1 ORDER BY 1 DESC LIMIT ?",
        [days],
    )
    return Space(
        objects=objects,
        conversations=[
            (int(c), str(s), int(n), int(mb), int(pb), int(sb))
            for c, s, n, mb, pb, sb in conversations
        ],
        days=[(str(d), int(n), int(b or 0)) for d, n, b in by_day],
    )


def _sqlite_objects(store: Store) -> list[StoredObject]:
    """SQLite's pages by table and index (``dbstat``), an FTS5 index's shadow tables and
    their own indexes counted as the index they serve."""
    rows = store.fetchall(
        "SELECT d.name, coalesce(m.type, 'table'), coalesce(m.tbl_name, d.name), sum(d.pgsize)"
        " FROM dbstat d LEFT JOIN sqlite_schema m ON m.name = d.name GROUP BY d.name"
    )
    search = {
        str(name)
        for (name,) in store.fetchall(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        )
    }
    sizes: dict[tuple[str, str, str], int] = {}
    for name, kind, table, pages in rows:
        owner = next(
            (s for s in search if str(table) in {s + shadow for shadow in _FTS_SHADOWS}), None
        )
        if owner is not None:
            key = (owner, "search index", owner)
        elif name == "sqlite_schema":
            key = ("sqlite_schema", "table", "sqlite_schema")
        else:
            key = (str(name), "index" if kind == "index" else "table", str(table))
        sizes[key] = sizes.get(key, 0) + int(pages)
    return _largest_first(sizes)


def _postgres_objects(store: Store) -> list[StoredObject]:
    """The catalog's sizes of the schema's tables (their TOAST data with them) and indexes
    (a search index is a GIN index over a table's words)."""
    rows = store.fetchall(
        "SELECT c.relname, c.relkind, coalesce(t.relname, c.relname), am.amname,"
        " CASE WHEN c.relkind = 'r'"
        "  THEN pg_table_size(c.oid) ELSE pg_relation_size(c.oid) END"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_index i ON i.indexrelid = c.oid"
        " LEFT JOIN pg_class t ON t.oid = i.indrelid"
        " LEFT JOIN pg_am am ON am.oid = c.relam"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')"
    )
    sizes: dict[tuple[str, str, str], int] = {}
    for name, kind, table, method, size in rows:
        if kind == "r":
            what = "table"
        else:
            what = "search index" if method in ("gin", "gist") else "index"
        sizes[(str(name), what, str(table))] = int(size)
    return _largest_first(sizes)


def _largest_first(sizes: dict[tuple[str, str, str], int]) -> list[StoredObject]:
    objects = [StoredObject(n, k, t, b) for (n, k, t), b in sizes.items()]
    return sorted(objects, key=lambda o: (-o.bytes, o.name))
