"""The docs stay true to the code: every setting is documented with its default and its part, links
resolve."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.fields import FieldInfo

from app.settings import Settings
from app.settings.base import Part

DOCS = Path(__file__).resolve().parents[3] / "docs"
TABLE_HEADER = "| Variable | Default | Description |"
ROW = re.compile(r"^\|\s*`(ANVIL_[A-Z0-9_]+)`\s*\|\s*([^|]*?)\s*\|")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def documented_settings() -> dict[str, str]:
    """Variable -> documented default, read from the one settings table in configuration.md."""
    lines = (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines()
    assert lines.count(TABLE_HEADER) == 1, "configuration.md must have exactly one settings table"
    start = lines.index(TABLE_HEADER) + 2  # skip the header and the | --- | row
    rows: dict[str, str] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        assert match is not None, f"unexpected settings row: {line}"
        variable, default = match.groups()
        assert variable not in rows, f"{variable} is documented twice"
        rows[variable] = default
    return rows


def rendered_default(field: FieldInfo) -> str:
    """A field default as the table writes it: `value`, `unset` for None, `a,b` or `empty` for a list."""
    default = field.get_default(call_default_factory=True)
    if isinstance(default, list):
        return f"`{','.join(default)}`" if default else "empty"
    if default is None:
        return "unset"
    return f"`{default}`"


def test_every_setting_is_documented_and_nothing_else() -> None:
    expected = {"ANVIL_" + name.upper() for name in Settings.model_fields}
    assert set(documented_settings()) == expected


def test_documented_defaults_match_the_code() -> None:
    documented = documented_settings()
    for name, field in Settings.model_fields.items():
        variable = "ANVIL_" + name.upper()
        assert documented[variable] == rendered_default(field), variable


def relative_links(markdown: str) -> list[str]:
    """Link targets outside code that point into the repository (no scheme, not a bare anchor)."""
    prose = INLINE_CODE.sub("", FENCE.sub("", markdown))
    targets = [target for target in LINK.findall(prose) if not target.startswith("#")]
    return [target for target in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def test_relative_links_point_to_existing_files() -> None:
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "docs/ has no pages"
    broken = []
    for page in pages:
        for target in relative_links(page.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.name}: {target}")
    assert broken == []


def test_the_link_finder_ignores_code_and_absolute_links() -> None:
    markdown = "See [a](a.md#x), [b](https://example.com), [c](#here), `[d](d.md)`.\n```\n[e](e.md)\n```\n"
    assert relative_links(markdown) == ["a.md#x"]


PARTS_HEADER = "| Part | Its own settings | Taken by |"
PART_ROW = re.compile(r"^\|\s*`(\w+)`\s*\|([^|]*)\|")


def every_part(model: type[Part]) -> list[type[Part]]:
    """The parts `model` is composed of, nested ones too, each once."""
    found: list[type[Part]] = []
    for base in model.__bases__:
        if issubclass(base, Part) and base is not Part:
            found += [part for part in (base, *every_part(base)) if part not in found]
    return found


def own_settings(part: type[Part]) -> set[str]:
    """The variables `part` declares itself, not those of the parts it extends."""
    inherited = {name for base in part.__bases__ if issubclass(base, Part) for name in base.model_fields}
    return {"ANVIL_" + name.upper() for name in part.model_fields if name not in inherited}


def test_the_table_of_parts_names_each_part_with_its_own_settings() -> None:
    lines = (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(PARTS_HEADER) + 2
    documented: dict[str, set[str]] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        match = PART_ROW.match(line)
        assert match is not None, f"unexpected row of parts: {line}"
        documented[match[1]] = set(re.findall(r"`(ANVIL_[A-Z0-9_]+)`", match[2]))
    assert documented == {part.__name__: own_settings(part) for part in every_part(Settings)}
