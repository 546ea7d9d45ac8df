"""The ports: what the domain needs from the outside world, as small Protocols.

- `ConversationStore`: where conversations live (memory, SQLite, Cosmos DB).
- `AnswerEngine`: what turns a question into an answer (retrieval, echo, a language model).
- `KnowledgeIndex`: the documents answers come from: passages ranked for some words, a document
  read whole, and what is served now (`IndexStatus`).
- `Verifier`: what turns a bearer token into the caller it proves (dev issuer, Entra ID).
- `Embedder`: what turns passages and questions into vectors (local model, an embeddings API).

The rooms beside the domain implement them (`app/stores/`, `app/engines/`, `app/auth/`); the
composition root (`app/lifespan.py`) chooses which, from the settings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from app.domain.conversation import Conversation, ConversationPage
from app.domain.principal import Principal

#: Vectors of an embedder: one float32 row per text.
Vectors = npt.NDArray[np.float32]

# --- The knowledge index ------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexStatus:
    """The knowledge index being served: its version ("" for one built in memory), how many
    passages and documents it holds, and when it was built (seconds since the epoch, or None)."""

    version: str
    passages: int
    documents: int
    built_at: float | None
    #: The embedder its passage vectors come from; None for an index ranked by words alone.
    embedder: str | None = None
    #: How many of its passages have their vector (all but while they are being embedded).
    embedded: int = 0
    #: What the knowledge is called, and what it covers, when something says (settings, index).
    name: str | None = None
    description: str | None = None
    #: For how many seconds a newer version has been seen and could not be fetched; None while the
    #: newest version seen is the one served.
    behind: float | None = None


class Embedder(Protocol):
    """Turns texts into unit-length vectors whose dot product says how alike they mean.

    `name` says which model (and adapter) made a vector: vectors of two embedders never compare,
    so an index is served only with the embedder its passages were embedded by. `embed` blocks
    (run it off the event loop); a question and a passage may be embedded differently
    (`query=True` for a question). It raises `EngineFailed` or `Unavailable` when it cannot.
    """

    name: str
    #: Passages per call when an index is built.
    batch_size: int

    def embed(self, texts: Sequence[str], *, query: bool) -> Vectors:
        """One row per text, float32, each of length 1."""
        ...

    def close(self) -> None:
        """Release what it holds (a model, an HTTP client)."""
        ...


# --- Conversation stores ------------------------------------------------------------------------


class VersionConflict(Exception):
    """Another writer got there first (or the conversation is gone): re-read and re-apply."""


class QuotaFull(Exception):
    """The user already keeps the most live conversations allowed: the new one was not created."""

    def __init__(self, kept: int) -> None:
        super().__init__(f"{kept} live conversations")
        #: How many live conversations the user keeps (at least the limit).
        self.kept = kept


class InvalidCursor(ValueError):
    """A listing cursor this store did not issue (or that no longer parses)."""


class Stored(NamedTuple):
    """A conversation as read, with the concurrency token (ETag) a conditional write must name.

    An ETag never repeats for a key: one read before a delete can never match what is written
    after it, even when the conversation is created again with the same version numbers.
    """

    conversation: Conversation
    etag: str


class ConversationStore(Protocol):
    """Where conversations live. Every implementation passes `tests/contract`.

    Stores keep whole `Conversation` values under `conversation_key(oid, conversationId)` and
    write optimistically: `create` fails if a live conversation already has the key, `replace`
    fails unless the stored conversation still carries the ETag the caller read. Expired
    conversations behave exactly as missing ones. Stores know nothing of users' rights: the
    services check `tid` and decide what to load.
    """

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        """The live conversation under this key and its ETag, or None when missing or expired."""
        ...

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key.

        An expired conversation under the same key is replaced. With `max_conversations`, the
        conversation is created only if its user keeps fewer live ones in its tenant, checked in
        the same atomic step as the creation (so concurrent creations never pass the limit
        together); otherwise `QuotaFull`.
        """
        ...

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        """Overwrite the stored conversation if it still carries `if_match`; returns the new ETag.

        Raises `VersionConflict` when the stored conversation changed, expired or is gone.
        """
        ...

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        """Remove a conversation; True if a live one was removed.

        `if_match` is the ETag of a read that found it live: a store may then skip reading it
        again. A conversation rewritten since that read is still removed (a write leaves it live).
        """
        ...

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations in tenant `tid`, newest `updatedAt` first (ties: by id).

        At most `limit` items per page; `cursor` (from a previous page) continues the listing.
        Raises `InvalidCursor` for a cursor this store did not issue.
        """
        ...

    async def count(self, oid: str, tid: str) -> int:
        """How many live conversations the user has in tenant `tid`."""
        ...

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user in tenant `tid`; returns how many live ones were removed."""
        ...

    async def check(self, *, write: bool = False) -> None:
        """Raise if the store cannot serve requests (used by `/readyz`); with `write`, if it
        cannot write either, where it can tell without changing a conversation."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""
        ...


# --- Answer engines -----------------------------------------------------------------------------


class PastExchange(Protocol):
    """An earlier question and its answer (a stored turn is handed over as is), oldest first."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def sources(self) -> tuple[str, ...] | None:
        """The corpus files the answer cited, the one it was answered from first; None for a
        turn kept before turns kept them."""
        ...


@dataclass(frozen=True, slots=True)
class Passage:
    """A ranked piece of the corpus: the file it comes from (relative path), its heading and text,
    the version of the knowledge index it was found in (None for an index built in memory), and
    the page it is published at."""

    source: str
    heading: str
    text: str
    score: float
    index_version: str | None = None
    #: Where the passage is published (its page and heading anchor); None when not known.
    url: str | None = None
    #: The title of its page; None when it has none of its own.
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """What one answer cost a language model, in its own tokens."""

    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Answer:
    """What an engine answered, with the passages it drew on (empty when none).

    `usage` is the model's token count, None for engines that call no model. `history_left_out`
    counts the earliest turns the engine could not fit in its context (and so did not see).
    `note` is what the engine has to say about how it answered (the caller reads it in the
    envelope's `note`), such as instructions it could not follow.
    """

    text: str
    sources: tuple[Passage, ...] = ()
    usage: Usage | None = None
    history_left_out: int = 0
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """The text of one corpus file, as `fetch` returns it: at most the characters asked for."""

    source: str
    title: str
    text: str
    #: Length of the whole text; larger than `len(text)` when it was cut.
    total_chars: int

    @property
    def truncated(self) -> bool:
        """Whether `text` stops before the end of the file."""
        return len(self.text) < self.total_chars


#: Told how an answer is going: `(progress, total, message)`, progress rising, total if known.
Progress = Callable[[float, float | None, str | None], Awaitable[None]]


class AnswerEngine(Protocol):
    """Turns a question into an answer; may use earlier turns and the conversation's instructions.

    An engine that cannot answer right now raises `Unavailable` (busy, with the wait it was
    given) or `EngineFailed`; nothing is stored for an answer that failed.
    """

    name: str

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        """Answer `question`. `history` holds the conversation's earlier turns, oldest first.

        `progress`, when given, is awaited as the answer is written (never after it returns).
        """
        ...


class KnowledgeIndex(Protocol):
    """The documents Anvil answers from, as served now (one index, swapped whole when a new
    version is served: a call finishes on the version it started on)."""

    async def search(self, text: str, max_results: int) -> list[Passage]:
        """The passages that best match `text`, best first, at most `max_results`."""
        ...

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        """The text of corpus file `source` (as named in `Passage.source`), or None if unknown."""
        ...

    def status(self) -> IndexStatus:
        """What is served now, for readiness."""
        ...


# --- Sign-in ------------------------------------------------------------------------------------


class Verifier(Protocol):
    """Turns a bearer token into the caller it proves, or raises `AuthError`."""

    async def verify(self, token: str) -> Principal: ...
