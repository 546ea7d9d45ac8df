"""Answers written by a language model, grounded on the corpus (`openai` and `azure-openai`).

Every answer goes the same way:

1. A follow-up is first rewritten by the model into a standalone search query, from the last
   turns, so that "and how is it configured?" is searched as what "it" is.
2. The best passages of the corpus (the index `search` uses) are numbered in the prompt; the
   model is told to answer only from them, to cite them as `[n]`, and to say plainly when they do
   not answer the question.
3. Earlier turns go in as earlier messages, newest first until the token budget is spent (the
   oldest are left out, and the answer says so); conversation instructions join the system prompt.
4. The reply's citations become `sources`, renumbered in the order they are cited; a reply that
   cites nothing has no sources.

The model is called through the official `openai` SDK with retries off
(`app.engines.openai_client`): a 429 or 503 becomes the "busy, retry in N s" error with the
model's own wait, instead of a request that sleeps through it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from app.domain.ports import Answer, KnowledgeIndex, Passage, PastExchange, Progress, Usage
from app.engines.openai_client import OpenAIEndpoint, Wording, failure
from app.errors import EngineFailed

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam

    from app.settings.engines import EngineSettings

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = """\
You are Anvil, an assistant that answers questions about a documentation corpus.
Rules:
- Answer only from the numbered passages given with the question. Do not use other knowledge.
- Cite every passage you use by its number in square brackets, e.g. [1] or [2][3], right after \
the statement it supports.
- If the passages do not answer the question, say plainly that the documentation does not cover \
it, and cite nothing.
- Be concise: a few sentences or a short list. Keep code and setting names exactly as written."""

INSTRUCTIONS_HEADER = "Instructions for this conversation, from the user (the rules above still apply):"

REWRITE_PROMPT = """\
Rewrite the user's last question as one standalone search query for the documentation, using the \
conversation only to resolve what the question refers to. If the question already stands on its \
own, repeat it unchanged. Reply with the query alone."""

#: Turns of the conversation the query rewrite sees; the newest matter most.
REWRITE_TURNS = 3
REWRITE_MAX_TOKENS = 64
#: How the model's errors read.
WORDING = Wording(
    "The language model",
    credentials="the engine's key or role assignment",
    unknown_model="the operator must check Anvil's engine settings",
    refused="rephrase or shorten the question",
)
#: Progress notifications while the model writes are at least this far apart (seconds).
PROGRESS_INTERVAL = 0.25

_CITATION = re.compile(r"\[(\d{1,2})\]")


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: about four characters per token, plus a message's overhead."""
    return len(text) // 4 + 4


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """How the model is asked: model (or Azure deployment) name and generation bounds."""

    model: str
    max_output_tokens: int = 800
    temperature: float = 0.2
    history_tokens: int = 3000
    passages: int = 5
    timeout_seconds: float = 60.0
    #: Per-request headers, e.g. leaving out `Authorization` for an endpoint that needs no key.
    extra_headers: Mapping[str, Any] | None = None


class ChatEngine:
    """An `AnswerEngine` that has a language model write grounded, cited answers.

    `knowledge` provides the passages; `client` is an `openai.AsyncOpenAI` (or
    `AsyncAzureOpenAI`) with retries off (`app.engines.openai_client`).
    """

    def __init__(
        self,
        name: str,
        knowledge: KnowledgeIndex,
        client: AsyncOpenAI,
        options: ChatOptions,
        *,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self._knowledge = knowledge
        self._client = client
        self._options = options
        self._close = close

    async def aclose(self) -> None:
        """Close the HTTP client (and the credential that signs its requests)."""
        await self._client.close()
        if self._close is not None:
            await self._close()

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        """Search (with a standalone query for a follow-up), then have the model answer from the passages."""
        usage = Usage(0, 0)
        query = question
        if history:
            if progress is not None:
                await progress(0, None, "Reading the conversation")
            query, usage = await self._standalone_query(question, history)
        if progress is not None:
            await progress(1, None, "Searching the documentation")
        passages = await self._knowledge.search(query, self._options.passages)
        messages, left_out = self.prompt(question, history, instructions, passages)
        if progress is None:
            text, spent = await self._complete(messages)
        else:
            text, spent = await self._stream(messages, progress)
        usage = Usage(usage.input_tokens + spent.input_tokens, usage.output_tokens + spent.output_tokens)
        text, cited = renumber_citations(text, passages)
        return Answer(text=text, sources=cited, usage=usage, history_left_out=left_out)

    def prompt(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None,
        passages: Sequence[Passage],
    ) -> tuple[list[ChatCompletionMessageParam], int]:
        """The messages for the answer, and how many of the earliest turns did not fit."""
        system = SYSTEM_PROMPT
        if instructions:
            system += f"\n\n{INSTRUCTIONS_HEADER}\n{instructions}"
        kept: list[PastExchange] = []
        budget = self._options.history_tokens
        for turn in reversed(history):
            cost = estimate_tokens(turn.question) + estimate_tokens(turn.answer)
            if cost > budget:
                break
            budget -= cost
            kept.append(turn)
        kept.reverse()
        messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}]
        for turn in kept:
            messages.append({"role": "user", "content": turn.question})
            messages.append({"role": "assistant", "content": turn.answer})
        messages.append({"role": "user", "content": grounded_question(question, passages)})
        return messages, len(history) - len(kept)

    async def _standalone_query(self, question: str, history: Sequence[PastExchange]) -> tuple[str, Usage]:
        recent = "\n".join(
            f"User: {turn.question}\nAssistant: {_first_line(turn.answer)}"
            for turn in history[-REWRITE_TURNS:]
        )
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": REWRITE_PROMPT},
            {"role": "user", "content": f"Conversation:\n{recent}\n\nLast question: {question}"},
        ]
        text, usage = await self._complete(messages, max_tokens=REWRITE_MAX_TOKENS, temperature=0.0)
        query = " ".join(text.split())[:500]
        return query or question, usage

    async def _complete(
        self,
        messages: list[ChatCompletionMessageParam],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> tuple[str, Usage]:
        options = self._options
        try:
            with anyio.fail_after(options.timeout_seconds):
                response = await self._client.chat.completions.create(
                    model=options.model,
                    messages=messages,
                    max_tokens=max_tokens or options.max_output_tokens,
                    temperature=options.temperature if temperature is None else temperature,
                    timeout=options.timeout_seconds,
                    extra_headers=options.extra_headers,
                )
        except Exception as error:
            raise failure(error, WORDING, options.timeout_seconds) from error
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        if not text.strip():
            raise _empty_reply(choice.finish_reason if choice else None)
        usage = response.usage
        spent = Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(0, 0)
        return text.strip(), spent

    async def _stream(
        self, messages: list[ChatCompletionMessageParam], progress: Progress
    ) -> tuple[str, Usage]:
        options = self._options
        parts: list[str] = []
        written = 0
        spent = Usage(0, 0)
        finish: str | None = None
        last_report = -PROGRESS_INTERVAL
        try:
            # The whole answer, not each read, must arrive within the timeout.
            with anyio.fail_after(options.timeout_seconds):
                stream = await self._client.chat.completions.create(
                    model=options.model,
                    messages=messages,
                    max_tokens=options.max_output_tokens,
                    temperature=options.temperature,
                    timeout=options.timeout_seconds,
                    extra_headers=options.extra_headers,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                async with stream:
                    async for chunk in stream:
                        if chunk.usage is not None:
                            spent = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                        for choice in chunk.choices:
                            finish = choice.finish_reason or finish
                            if choice.delta.content:
                                parts.append(choice.delta.content)
                                written += len(choice.delta.content)
                        now = time.monotonic()
                        if written and now - last_report >= PROGRESS_INTERVAL:
                            last_report = now
                            await progress(2 + written, None, "Writing the answer")
        except Exception as error:
            raise failure(error, WORDING, options.timeout_seconds) from error
        text = "".join(parts).strip()
        if not text:
            raise _empty_reply(finish)
        return text, spent


def grounded_question(question: str, passages: Sequence[Passage]) -> str:
    """The last user message: the numbered passages, then the question."""
    if not passages:
        return f"Passages: none of the documentation matches this question.\n\nQuestion: {question}"
    numbered = "\n\n".join(
        f"[{number}] {p.source} ({p.heading})\n{p.text}" for number, p in enumerate(passages, start=1)
    )
    return f"Passages:\n\n{numbered}\n\nQuestion: {question}"


def renumber_citations(text: str, passages: Sequence[Passage]) -> tuple[str, tuple[Passage, ...]]:
    """`text` with its `[n]` citations renumbered in order of first use, and the passages cited.

    A number that names no passage is removed from the text; the n-th source is cited as `[n]`.
    """
    order: dict[int, int] = {}

    def renumber(match: re.Match[str]) -> str:
        number = int(match.group(1))
        if not 1 <= number <= len(passages):
            return ""
        if number not in order:
            order[number] = len(order) + 1
        return f"[{order[number]}]"

    renumbered = _CITATION.sub(renumber, text)
    return renumbered, tuple(passages[number - 1] for number in order)


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return line[:300]


def _empty_reply(finish_reason: str | None) -> EngineFailed:
    why = f" (finish reason: {finish_reason})" if finish_reason else ""
    return EngineFailed(f"The language model returned no answer{why}; rephrase the question or ask again.")


def open_chat_engine(settings: EngineSettings, knowledge: KnowledgeIndex) -> ChatEngine:
    """The `openai` or `azure-openai` engine the settings describe, answering from `knowledge`."""
    if settings.answer_engine == "azure-openai":
        # Both are required by the settings for this engine.
        assert settings.azure_openai_deployment is not None and settings.azure_openai_endpoint is not None
        model = settings.azure_openai_deployment
        key = settings.azure_openai_api_key
        endpoint = OpenAIEndpoint(
            settings.answer_timeout_seconds,
            key=None if key is None else key.get_secret_value(),
            azure_endpoint=settings.azure_openai_endpoint,
            api_version=settings.azure_openai_api_version,
        )
    else:
        assert settings.openai_model is not None
        model = settings.openai_model
        key = settings.openai_api_key
        endpoint = OpenAIEndpoint(
            settings.answer_timeout_seconds,
            base_url=settings.openai_base_url,
            key=None if key is None else key.get_secret_value() or None,
        )
    client, close = endpoint.async_client()
    options = ChatOptions(
        model=model,
        max_output_tokens=settings.answer_max_output_tokens,
        temperature=settings.answer_temperature,
        history_tokens=settings.answer_history_tokens,
        passages=settings.answer_passages,
        timeout_seconds=settings.answer_timeout_seconds,
        extra_headers=endpoint.extra_headers,
    )
    return ChatEngine(settings.answer_engine, knowledge, client, options, close=close)
