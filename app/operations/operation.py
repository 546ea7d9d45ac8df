"""What an operation is: its arguments, result, call, text, annotations and REST route, and
what its handler is handed (`Call`). `app.operations.catalog` declares each one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from app.domain.ask import AskService
from app.domain.conversation import CONVERSATION_ID_RULE
from app.domain.lifecycle import ConversationService
from app.domain.ports import KnowledgeIndex, Progress
from app.domain.principal import Principal
from app.domain.receipts import CLIENT_REQUEST_ID_RULE
from app.errors import InvalidInput
from app.operations.schemas import (
    NOT_BLANK,
    UNENCODABLE_TEXT,
    Arguments,
    configured_length,
    configured_texts,
)
from app.settings.history import HistorySettings
from app.telemetry.instruments import Telemetry

In = TypeVar("In", bound=Arguments)
Out = TypeVar("Out", bound=BaseModel)


class Services(Protocol):
    """The running services a handler calls. `app.runtime.Runtime` is one: the catalog names
    what it calls, not what opens it, so it stands beneath the lifespan and the surfaces."""

    @property
    def service(self) -> AskService: ...
    @property
    def conversations(self) -> ConversationService: ...
    @property
    def knowledge(self) -> KnowledgeIndex | None: ...
    @property
    def telemetry(self) -> Telemetry: ...


@dataclass(frozen=True, slots=True)
class Call:
    """Who is calling, and the running services: what every handler gets besides its arguments."""

    runtime: Services
    principal: Principal | None
    #: Where to report how a long operation is going (an MCP client that sent a progressToken).
    progress: Progress | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """Where an operation lives on REST. Path parameters are named by their wire (camelCase) name;
    the other arguments go in the query for GET and DELETE, and in a JSON body otherwise."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    operation_id: str
    summary: str
    tag: str
    status_code: int = 200
    #: Statuses the operation itself can answer with a problem document (its arguments, its
    #: service); `app.rest.routes` adds those every route can answer (front door, sign-in, limits).
    errors: tuple[int, ...] = (400, 503)


@dataclass(frozen=True, slots=True)
class Described:
    """What a description names: the history bounds in force, and the knowledge answered from,
    by its name and what it covers (None when nobody said)."""

    history: HistorySettings
    knowledge: str | None = None
    covers: str | None = None

    @property
    def knowledge_name(self) -> str:
        """The knowledge's name, else "the knowledge base"."""
        return self.knowledge or "the knowledge base"

    @property
    def knowledge_phrase(self) -> str:
        """The knowledge's name with what it covers: `the handbook (leave, pay and travel)`."""
        return f"{self.knowledge_name} ({self.covers})" if self.covers else self.knowledge_name


@dataclass(frozen=True, slots=True)
class Operation(Generic[In, Out]):
    """One operation: its contract, its call, and how each surface shows it."""

    name: str
    title: str
    #: Written for an agent: what it does and when to use it. A function when it names settings
    #: or the knowledge answered from.
    description: str | Callable[[Described], str]
    arguments: type[In]
    result: type[Out]
    handler: Callable[[Call, In], Awaitable[Out]]
    #: The tool's text content, from its arguments and result.
    text: Callable[[In, Out], str]
    route: Route
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    #: False for operations offered on REST only.
    tool: bool = True

    def describe(self, described: Described) -> str:
        """The description, with the settings in force and the knowledge where it names them."""
        return self.description if isinstance(self.description, str) else self.description(described)

    def parse(self, arguments: Mapping[str, Any] | None, settings: HistorySettings) -> In:
        """The arguments checked against the model, and each text whose longest length is a
        setting against the value `settings` configure: the one place arguments are checked.
        `InvalidInput` naming every bad field."""
        try:
            parsed = self.arguments.model_validate(arguments or {})
        except ValidationError as error:
            raise InvalidInput(describe_invalid_arguments(self.name, error, self.arguments)) from None
        too_long = [
            f"{wire_name} is {length} characters long, more than the {limit} that "
            f"{rule.environment_variable} allows: shorten it"
            for wire_name, rule, text in configured_texts(parsed)
            if (length := len(text)) > (limit := int(getattr(settings, rule.setting)))
        ]
        if too_long:
            raise InvalidInput(f"Invalid arguments for {self.name}: {'; '.join(too_long)}.")
        return parsed


#: What a refused `cursor` is told, whether its shape or the store refused it.
CURSOR_RULE = (
    "cursor is not one this server issued: pass the nextCursor of the previous page unchanged, "
    "or omit cursor to start from the newest conversation"
)


def describe_invalid_arguments(
    operation: str, error: ValidationError, model: type[Arguments] | None = None
) -> str:
    """One sentence per bad field, in words an agent can act on; values are never echoed."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        configured = configured_length(model, where) if model is not None else None
        if item["type"] == "string_pattern_mismatch" and where == "conversationId":
            message = CONVERSATION_ID_RULE
        elif item["type"] == "string_pattern_mismatch" and where == "clientRequestId":
            message = CLIENT_REQUEST_ID_RULE
        elif where == "cursor" and item["type"] in ("string_pattern_mismatch", "string_too_long"):
            message = CURSOR_RULE
        elif item["type"] == "string_pattern_mismatch" and item.get("ctx", {}).get("pattern") == NOT_BLANK:
            message = f"{where} must not be empty or only whitespace: pass some text"
        elif item["type"] == "string_too_long" and configured is not None:
            # Past the ceiling of the setting; the configured limit, lower, is the schema's
            # maxLength, and pydantic's number would contradict it.
            message = f"{where} is longer than {configured.environment_variable} allows: shorten it"
        elif item["type"] == "string_unicode":
            message = UNENCODABLE_TEXT
        elif item["type"] == "extra_forbidden":
            message = "not an argument of this operation; remove it"
        else:
            message = item["msg"]
        problems.append(message if message.startswith(where) else f"{where}: {message}")
    return f"Invalid arguments for {operation}: {'; '.join(problems)}. Fix them and call again."
