"""The engine's recall: lcm_grep, lcm_describe, delegation grants, lcm_expand,
lcm_expand_query and chat_context_query (the tools' declaration is
:mod:`lossless.retrieval.tools`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..retrieval import grants
from ..retrieval.context_query import ContextQueryResult
from ..retrieval.context_query import Kind as QueryKind
from ..retrieval.context_query import Order as QueryOrder
from ..retrieval.context_query import chat_context_query as query_context
from ..retrieval.describe import Description
from ..retrieval.describe import describe as describe_id
from ..retrieval.expand import ExpandResult
from ..retrieval.expand import expand as expand_dag
from ..retrieval.expand_query import ExpandQueryResult
from ..retrieval.expand_query import expand_query as expand_query_answer
from ..retrieval.grants import Grant
from ..retrieval.grep import GrepError, GrepResult, Mode, Scope, Sort
from ..retrieval.grep import grep as grep_store
from .base import ConversationRef, Facade

__all__ = ["COMMON_ROWS", "COMMON_SHARE", "REQUEST_HITS", "REQUEST_WORDS", "Recall"]

#: The most words of a request its search for relevant messages uses (the first ones).
REQUEST_WORDS = 48
#: How many messages that search ranks for an assembly to choose from.
REQUEST_HITS = 24
#: A word held by more than this share of the stored messages (and more than COMMON_ROWS of
#: them) is left out of that search.
COMMON_SHARE = 1 / 3
COMMON_ROWS = 4


class Recall(Facade):
    """Finding the past again: search, describe, expand under grants, answer questions."""

    def grep(
        self,
        pattern: str,
        *,
        conversation: ConversationRef | None = None,
        family: bool = True,
        mode: Mode = "full_text",
        scope: Scope = "both",
        since: str | None = None,
        before: str | None = None,
        limit: int = 20,
        sort: Sort = "relevance",
        within: Sequence[int] | None = None,
        offset: int = 0,
        reveal: bool = False,
        include_archived: bool = False,
    ) -> GrepResult:
        """``lcm_grep``: search messages, summaries or large files.

        With *conversation*, the search covers its family (the conversations sharing its
        session key; only itself with ``family=False``), archived ones too; without, the
        whole store but its archived conversations (*include_archived* takes them in).
        *within* limits it further to those conversation ids (a scoped server's). *offset*
        skips that many hits: the result's ``next_offset`` is the next page's, while
        ``more`` says so. *reveal* also searches the originals of messages whose secrets were
        masked (for the owner: a secret's value is found, and shown, only so).
        """
        return grep_store(
            self.store,
            pattern,
            conversation_ids=self._scope(conversation, family, within),
            archived=include_archived,
            mode=mode,
            scope=scope,
            since=since,
            before=before,
            limit=limit,
            sort=sort,
            offset=offset,
            reveal=reveal,
        )

    def describe(
        self,
        ident: str,
        *,
        conversation: ConversationRef | None = None,
        token_cap: int | None = None,
        lines: tuple[int, int] | None = None,
        within: Sequence[int] | None = None,
    ) -> Description:
        """``lcm_describe``: a summary, large file or message by id, with what lies below it.

        With *conversation* (or *within*: conversation ids), ids outside its family are
        unknown (nothing leaks across).
        """
        scope = self._scope(conversation, True, within)
        return describe_id(self.services, ident, scope=scope, token_cap=token_cap, lines=lines)

    def create_grant(
        self,
        conversation: ConversationRef,
        *,
        family: bool = True,
        token_cap: int | None = None,
        max_depth: int | None = None,
        ttl_seconds: int | None = None,
        purpose: str | None = None,
    ) -> Grant:
        """A delegation grant over a conversation (and its family): what a sub-agent may expand.

        Defaults: ``max_expand_tokens``, ``grant_max_depth``, ``grant_ttl_seconds``.
        """
        return grants.grant_for(
            self.services,
            self.conversation(conversation),
            family=family,
            token_cap=token_cap,
            max_depth=max_depth,
            ttl_seconds=ttl_seconds,
            purpose=purpose,
        )

    def check_grant(self, grant_id: str) -> Grant:
        """A grant that is still live (refused when unknown, revoked or expired)."""
        return grants.check(self.store, grant_id)

    def revoke_grant(self, grant_id: str) -> bool:
        """Revoke a delegation grant now; ``False`` when it was revoked already (an unknown id
        is a :class:`~lossless.errors.NotFoundError`)."""
        return grants.revoke(self.store, grant_id)

    def expand(
        self,
        grant_id: str,
        summary_ids: Sequence[str],
        *,
        max_depth: int | None = None,
        include_messages: bool = True,
        token_cap: int | None = None,
    ) -> ExpandResult:
        """``lcm_expand``: walk the DAG down from *summary_ids*, within what the grant allows."""
        return expand_dag(
            self.services,
            grant_id,
            summary_ids,
            max_depth=max_depth,
            include_messages=include_messages,
            token_cap=token_cap,
        )

    def expand_query(
        self,
        prompt: str,
        *,
        conversation: ConversationRef,
        query: str | None = None,
        summary_ids: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> ExpandQueryResult:
        """``lcm_expand_query``: answer *prompt* from the history below the summaries.

        Runs under a delegation grant that is revoked when it ends; see
        :mod:`lossless.retrieval.expand_query`.
        """
        return expand_query_answer(
            self.services,
            prompt,
            conversation=self.conversation(conversation),
            query=query,
            summary_ids=summary_ids,
            max_tokens=max_tokens,
        )

    def chat_context_query(
        self,
        *,
        conversation: ConversationRef | None = None,
        family: bool = True,
        kind: QueryKind = "both",
        role: str | None = None,
        tool_name: str | None = None,
        execution_id: str | None = None,
        status: str | None = None,
        since: str | None = None,
        before: str | None = None,
        text: str | None = None,
        limit: int = 20,
        offset: int = 0,
        order: QueryOrder = "newest",
        within: Sequence[int] | None = None,
    ) -> ContextQueryResult:
        """``chat_context_query``: the stored chat frames and the tool-execution log, filtered
        and paged (see :mod:`lossless.retrieval.context_query`). With *conversation*, its
        family (only itself with ``family=False``); without, the whole store; *within*
        limits it to those conversation ids."""
        if text is not None:
            text = text.replace("\x00", " ")  # as in grep: a NUL separates words
        return query_context(
            self.store,
            conversation_ids=self._scope(conversation, family, within),
            kind=kind,
            role=role,
            tool_name=tool_name,
            execution_id=execution_id,
            status=status,
            since=since,
            before=before,
            text=text,
            limit=limit,
            offset=offset,
            order=order,
        )

    def relevant_to(
        self,
        conversation: ConversationRef,
        request: str,
        *,
        within: Sequence[int] | None = None,
    ) -> list[int]:
        """The stored messages a search for *request* (the next request, free text) ranks
        first within *conversation*'s family (not its archived conversations), as message
        ids, the best first: what a prompt-aware assembly shows. The request is searched as
        its words (the first :data:`REQUEST_WORDS` of them), so no text is refused as search
        syntax, and without the words most messages hold (:data:`COMMON_SHARE`): they tell
        nothing of which to show, and a request made only of them finds nothing."""
        words = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", request)))
        words = self._telling(words[:REQUEST_WORDS])
        if not words:
            return []
        # The family, but for its archived conversations (a history the user cleared is not
        # brought back into the context; the recall tools still reach it).
        conv = self.conversation(conversation)
        archived = set(self.store.archived_conversation_ids()) - {conv.conversation_id}
        scope = [
            i for i in self._scope(conv.conversation_id, True, within) or [] if i not in archived
        ]
        try:
            found = grep_store(
                self.store,
                " ".join(words),
                conversation_ids=scope,
                scope="messages",
                sort="relevance",
                limit=REQUEST_HITS,
            )
        except GrepError:  # e.g. words the index cannot search: nothing is found
            return []
        return [int(h.id[4:]) for h in found.hits if h.id.startswith("msg#")]

    def _telling(self, words: list[str]) -> list[str]:
        """*words* without those the messages' index holds in more than :data:`COMMON_SHARE`
        of its rows (and more than :data:`COMMON_ROWS`)."""
        stems = {word: self.store.index_terms(word) for word in words}
        counts, rows = self.store.term_documents(
            "messages", sorted({t for terms in stems.values() for t in terms})
        )
        common = max(COMMON_ROWS, rows * COMMON_SHARE)
        return [w for w in words if all(counts.get(t, 0) <= common for t in stems[w])]

    def _scope(
        self,
        conversation: ConversationRef | None,
        family: bool,
        within: Sequence[int] | None,
    ) -> list[int] | None:
        """The conversation ids a recall call reads (``None``: all of them)."""
        ids: list[int] | None = None
        if conversation is not None:
            conv = self.conversation(conversation)
            ids = self.store.family_ids(conv) if family else [conv.conversation_id]
        if within is not None:
            allowed = set(within)
            ids = [i for i in ids if i in allowed] if ids is not None else sorted(allowed)
        return ids
