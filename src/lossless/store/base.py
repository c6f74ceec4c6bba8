"""The store: one interface over every aggregate, one implementation per back end.

:class:`Store` is the aggregates together — :class:`~.messages.MessageStore` (conversations
and messages), :class:`~.context.ContextStore`, :class:`~.summaries.SummaryStore` (the DAG)
and :class:`~.records.RecordStore` (session summaries, large files, checkpoints) and
:class:`~.forget.ForgetStore` (a message's text taken out of everything) and
:class:`~.provisional.ProvisionalStore` (summaries written at once, finished in place) — over
:class:`~.core.StoreCore`; :class:`~.sqlite.SQLiteStore` and :class:`~.postgres.PostgresStore`
supply what differs between engines. The aggregates stack in that order (the context reads
messages; the DAG rewrites the context), so each sees only what lies beneath it.
"""

from __future__ import annotations

from .access import AccessStore
from .activity import ActivityStore
from .checks import CheckStore
from .core import NO_LIMIT, in_chunks
from .forget import ForgetStore
from .grants import GrantStore
from .provisional import PendingCount, ProvisionalStore
from .records import RecordStore
from .search import SearchStore

__all__ = ["NO_LIMIT", "PendingCount", "Store", "in_chunks"]


class Store(
    ForgetStore,
    ProvisionalStore,
    RecordStore,
    ActivityStore,
    SearchStore,
    GrantStore,
    AccessStore,
    CheckStore,
):
    """A lossless store (see the module doc)."""
