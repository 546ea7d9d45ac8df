"""The arguments of every operation: MCP `inputSchema`, REST body or query. Their results are in
`app.operations.results`.

Argument models carry every rule a caller must follow (`pattern`, lengths, bounds) so that the
schema a model reads and the check that runs are one and the same. Fields are snake_case in
Python and camelCase on the wire. A length that is a setting (`ANVIL_MAX_QUESTION_CHARS`) is
marked `ConfiguredLength` on its field: `arguments_schema` states the configured value as
`maxLength` in every published schema (the MCP `inputSchema`, the REST OpenAPI document), and
`Operation.parse` refuses longer text, so both say the same number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.domain.conversation import CONVERSATION_ID_PATTERN
from app.domain.cursor import CURSOR_PATTERN, MAX_CURSOR_CHARS
from app.domain.lifecycle import MAX_LIST_LIMIT, MAX_TITLE_CHARS, MAX_TURNS_LIMIT
from app.settings.history import MAX_TEXT_CHARS, HistorySettings

#: Python's whitespace (`str.isspace`), the characters the services strip before they refuse
#: blank text, spelt so that JSON Schema (ECMA-262), Python and pydantic's regex engine all read
#: the same set (their own `\s` differ: U+001C to U+001F, U+0085, U+FEFF).
_SPACE = r"\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: Text with something besides whitespace in it (a pattern matches anywhere in the text).
NOT_BLANK = f"[^{_SPACE}]"

#: How every surface words a text argument that is not valid Unicode.
UNENCODABLE_TEXT = "contains text that is not valid Unicode (an unpaired surrogate): send valid Unicode text"


@dataclass(frozen=True, slots=True)
class ConfiguredLength:
    """Marks a text argument whose longest length is the setting `setting` (a `HistorySettings` field):
    `arguments_schema` publishes the configured value as its `maxLength`, and `Operation.parse`
    checks it. The model itself bounds such a field, where it needs a bound, by the setting's ceiling
    (`MAX_TEXT_CHARS`), which no configuration exceeds."""

    setting: str

    @property
    def environment_variable(self) -> str:
        return f"ANVIL_{self.setting.upper()}"


def configured_length(model: type[BaseModel], wire_name: str) -> ConfiguredLength | None:
    """The `ConfiguredLength` of `model`'s argument `wire_name`, if it has one."""
    for name, field in model.model_fields.items():
        if (field.alias or name) == wire_name:
            return next((rule for rule in field.metadata if isinstance(rule, ConfiguredLength)), None)
    return None


def configured_texts(arguments: BaseModel) -> list[tuple[str, ConfiguredLength, str]]:
    """Each text argument given whose longest length is a setting: its wire name, its rule, its text."""
    found = []
    for name, field in type(arguments).model_fields.items():
        text = getattr(arguments, name)
        rule = next((rule for rule in field.metadata if isinstance(rule, ConfiguredLength)), None)
        if rule is not None and isinstance(text, str):
            found.append((field.alias or name, rule, text))
    return found


#: The most passages one search returns.
MAX_SEARCH_RESULTS = 50
#: The most characters one fetch returns.
MAX_FETCH_CHARS = 100_000

#: `question`, `searchText` and `instructions`: at most ANVIL_MAX_QUESTION_CHARS characters.
QUESTION_LENGTH = ConfiguredLength("max_question_chars")


class Arguments(BaseModel):
    """Base of every argument model: wire names only, and an unknown argument is refused.

    Every text field carries a constraint (a length or a pattern), which also makes pydantic
    refuse text that cannot be stored: an unpaired UTF-16 surrogate, which JSON can carry but
    UTF-8 cannot (`string_unicode`, worded as `UNENCODABLE_TEXT`)."""

    model_config = ConfigDict(extra="forbid")


def conversation_id_field(description: str) -> Any:
    return Field(alias="conversationId", pattern=CONVERSATION_ID_PATTERN, description=description)


class AskInput(Arguments):
    """Arguments of `ask`."""

    model_config = ConfigDict(title="AskArguments")

    question: Annotated[str, QUESTION_LENGTH] = Field(
        min_length=1, pattern=NOT_BLANK, description="The question to answer, in plain words."
    )
    conversation_id: str | None = Field(
        None,
        alias="conversationId",
        pattern=CONVERSATION_ID_PATTERN,
        description=(
            "Continue (or start) this conversation: 1-64 letters, digits, '.', '_' or '-' (a UUID "
            "works). Pass the same id on every turn; omit it for a one-shot answer that stores nothing."
        ),
    )
    instructions: Annotated[str | None, QUESTION_LENGTH] = Field(
        None,
        max_length=MAX_TEXT_CHARS,
        description=(
            "Instructions for the whole conversation (tone, audience, format). Only when the "
            "conversation is created: passing them for an existing one is an error."
        ),
    )
    client_request_id: str | None = Field(
        None,
        alias="clientRequestId",
        pattern=CONVERSATION_ID_PATTERN,
        description=(
            "Retry key, same pattern as conversationId: a retry with the same key and arguments "
            "returns the stored answer instead of adding the turn twice."
        ),
    )


class SearchInput(Arguments):
    """Arguments of `search`."""

    model_config = ConfigDict(title="SearchArguments")

    search_text: Annotated[str, QUESTION_LENGTH] = Field(
        alias="searchText", min_length=1, pattern=NOT_BLANK, description="Words to look for."
    )
    max_results: int = Field(
        5,
        alias="maxResults",
        ge=1,
        le=MAX_SEARCH_RESULTS,
        description=f"How many passages to return (1-{MAX_SEARCH_RESULTS}).",
    )


class FetchInput(Arguments):
    """Arguments of `fetch`."""

    model_config = ConfigDict(title="FetchArguments")

    source: str = Field(
        min_length=1,
        max_length=1024,
        description="The file to read, exactly as `source` appears in ask's sources or search's results.",
    )
    max_chars: int = Field(
        20_000,
        alias="maxChars",
        ge=100,
        le=MAX_FETCH_CHARS,
        description=f"Return at most this many characters (100-{MAX_FETCH_CHARS}); truncated says if cut.",
    )


class StartInput(Arguments):
    """Arguments of `start_conversation`."""

    model_config = ConfigDict(title="StartConversationArguments")

    instructions: Annotated[str | None, QUESTION_LENGTH] = Field(
        None,
        max_length=MAX_TEXT_CHARS,
        description="Instructions the answer engine follows on every turn of the conversation.",
    )
    title: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_TITLE_CHARS,
        pattern=NOT_BLANK,
        description=f"A short title shown in list_conversations (1-{MAX_TITLE_CHARS} characters).",
    )


class ListInput(Arguments):
    """Arguments of `list_conversations`."""

    model_config = ConfigDict(title="ListConversationsArguments")

    limit: int = Field(
        20, ge=1, le=MAX_LIST_LIMIT, description=f"Conversations per page (1-{MAX_LIST_LIMIT})."
    )
    cursor: str | None = Field(
        None,
        max_length=MAX_CURSOR_CHARS,
        pattern=CURSOR_PATTERN,
        description="nextCursor of the previous page, unchanged; omit for the first page.",
    )


class GetInput(Arguments):
    """Arguments of `get_conversation`."""

    model_config = ConfigDict(title="GetConversationArguments")

    conversation_id: str = conversation_id_field("The conversation's id (from ask or start_conversation).")
    limit: int | None = Field(
        None,
        ge=1,
        le=MAX_TURNS_LIMIT,
        description=f"Return only the latest N turns (1-{MAX_TURNS_LIMIT}); omit for every kept turn.",
    )


class DeleteInput(Arguments):
    """Arguments of `delete_conversation`."""

    model_config = ConfigDict(title="DeleteConversationArguments")

    conversation_id: str = conversation_id_field("The conversation to delete, with all its turns.")


class NoInput(Arguments):
    """An operation without arguments."""

    model_config = ConfigDict(title="NoArguments")


def arguments_schema(model: type[Arguments], settings: HistorySettings) -> dict[str, Any]:
    """The JSON Schema of `model` as every surface publishes it: wire names, and each
    `ConfiguredLength` field's `maxLength` the value `settings` configure."""
    schema = model.model_json_schema(by_alias=True)
    for wire_name, stated in schema.get("properties", {}).items():
        rule = configured_length(model, wire_name)
        if rule is not None:
            for variant in stated.get("anyOf", [stated]):
                if variant.get("type") == "string":
                    variant["maxLength"] = int(getattr(settings, rule.setting))
    return schema
