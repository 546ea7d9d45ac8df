"""Deletes racing asks and reads on one conversation over real `anvil serve` processes: the
set-ups (a store and how many processes share it) and one signed-in user's requests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import httpx

from support.history_cluster import Cluster, StoreName


@dataclass(frozen=True)
class Setup:
    store: StoreName
    processes: int

    @property
    def name(self) -> str:
        return f"{self.store}-{self.processes}p"


SETUPS = [Setup("memory", 1), Setup("sqlite", 1), Setup("sqlite", 2), Setup("cosmos", 1), Setup("cosmos", 2)]


class Caller:
    """One signed-in user's requests, spread over the cluster's processes by `via`."""

    def __init__(self, cluster: Cluster, http: httpx.AsyncClient) -> None:
        self.cluster = cluster
        self.http = http
        self.headers = {"Authorization": f"Bearer {cluster.token(f'racer-{uuid.uuid4().hex[:8]}')}"}

    def _url(self, via: int) -> str:
        url = self.cluster.url(via % self.cluster.size)
        assert url is not None
        return url

    async def ask(self, conversation: str, question: str, via: int = 0) -> httpx.Response:
        return await self.http.post(
            f"{self._url(via)}/api/ask",
            json={"question": question, "conversationId": conversation},
            headers=self.headers,
        )

    async def get(self, conversation: str, via: int = 0) -> httpx.Response:
        return await self.http.get(f"{self._url(via)}/api/conversations/{conversation}", headers=self.headers)

    async def delete(self, conversation: str, via: int = 0) -> httpx.Response:
        return await self.http.delete(
            f"{self._url(via)}/api/conversations/{conversation}", headers=self.headers
        )


def questions_of(response: httpx.Response) -> list[str]:
    """The questions of a conversation read with `get`, checking its turns number 1..N."""
    assert response.status_code == 200, response.text
    turns = response.json()["turns"]
    assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1)), turns
    return [t["question"] for t in turns]
