"""A local Entra issuer for the unit tests of sign-in (no server process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from security.calls import CLIENT_ID
from support.entra_issuer import EntraIssuer, running_issuer
from support.entra_keys import signing_key


@pytest.fixture(scope="module")
def issuer() -> Iterator[EntraIssuer]:
    """Publishes two keys, as Entra does; tokens are signed with the first."""
    with running_issuer(CLIENT_ID, keys=[signing_key("entra-key-1"), signing_key("entra-key-2")]) as running:
        yield running
