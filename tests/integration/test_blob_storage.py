"""Index files and document folders in Blob Storage (`app.knowledge.blob`), against Azurite and
the real `azure-storage-blob` SDK: what is uploaded reads back with its ETag, a download is never
a mix of two versions, and every failure says what to change."""

from __future__ import annotations

import io
import threading
import uuid
from pathlib import Path

import pytest
from support.anvil_server import free_port
from support.azurite import ACCOUNT, Azurite

from app.blob_urls import BlobStorageError, is_blob_url, parse_blob_url
from app.knowledge import blob
from app.knowledge.blob import CONNECTION_STRING, blob_version, download, read_documents, upload
from app.knowledge.corpus import CorpusFile
from app.knowledge.index import PassageIndex, write

#: Larger than three download ranges, so that a download takes several requests.
LARGE = 2 * blob.CHUNK_BYTES + 12345
WRONG_KEY = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleS13cm9uZw=="


@pytest.fixture
def emulator(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Azurite:
    """Azurite, with its connection string in the environment as a developer would set it."""
    monkeypatch.setenv(CONNECTION_STRING, azurite.connection_string())
    return azurite


def fresh_url(server: Azurite, container: str = "indexes", suffix: str = ".anvilidx") -> str:
    return server.url(container, f"{uuid.uuid4().hex}/index{suffix}")


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def pattern(seed: bytes, size: int) -> bytes:
    """`size` bytes repeating `seed`: two versions differ at every range of a download."""
    return (seed * (size // len(seed) + 1))[:size]


def test_an_index_uploaded_reads_back_whole_with_the_etag_upload_returned(emulator: Azurite, tmp_path: Path):
    intro = CorpusFile(
        source="intro.md", title="Intro", text="# Intro\n\nAnvil keeps its index in Blob Storage.\n"
    )
    version, _ = write([intro], tmp_path / "local.anvilidx", sources=["docs"])
    url = fresh_url(emulator)

    etag = upload(tmp_path / "local.anvilidx", url)

    assert blob_version(url) == etag
    copy = tmp_path / "copy.anvilidx"
    with open(copy, "wb") as into:
        assert download(url, into) == etag
    assert copy.read_bytes() == (tmp_path / "local.anvilidx").read_bytes()
    index = PassageIndex.open(copy)
    try:
        assert index.version == version
    finally:
        index.close()


def test_uploading_again_gives_a_new_etag_and_the_new_bytes(emulator: Azurite, tmp_path: Path):
    url = fresh_url(emulator)
    first = upload(written(tmp_path / "first", pattern(b"first", LARGE)), url)

    second = upload(written(tmp_path / "second", pattern(b"second", LARGE)), url)

    assert second != first
    assert blob_version(url) == second
    into = io.BytesIO()
    assert download(url, into) == second
    assert into.getvalue() == pattern(b"second", LARGE)


def test_a_download_writes_from_where_the_file_stands(emulator: Azurite, tmp_path: Path):
    url = fresh_url(emulator)
    etag = upload(written(tmp_path / "index", b"the index"), url)
    into = io.BytesIO(b"header:")
    into.seek(0, io.SEEK_END)

    assert download(url, into) == etag
    assert into.getvalue() == b"header:the index"


def test_a_missing_blob_has_no_version_and_its_download_says_how_to_build_one(emulator: Azurite):
    url = fresh_url(emulator)

    assert blob_version(url) is None
    assert blob_version(emulator.url("nosuchcontainer", "index.anvilidx")) is None
    with pytest.raises(BlobStorageError) as raised:
        download(url, io.BytesIO())
    assert str(raised.value) == f"no blob at {url}: build one with `anvil index ... --output {url}`"


def test_an_upload_into_a_missing_container_says_to_create_it(emulator: Azurite, tmp_path: Path):
    url = emulator.url("nosuchcontainer", "index.anvilidx")

    with pytest.raises(BlobStorageError, match=r"there is no container 'nosuchcontainer'.*: create it"):
        upload(written(tmp_path / "index", b"x"), url)


def test_a_folder_lists_only_documents_below_its_prefix_with_relative_names_sorted(
    emulator: Azurite, tmp_path: Path
):
    root = uuid.uuid4().hex
    source = written(tmp_path / "doc", b"")
    for name in (
        "set/b.md",
        "set/a.mdx",
        "set/sub/c.md",
        "set/notes.txt",
        "set/readme.md.bak",
        "settle/x.md",
    ):
        source.write_bytes(name.encode())
        upload(source, emulator.url("docs", f"{root}/{name}"))

    expected = [(name, f"set/{name}".encode()) for name in ("a.mdx", "b.md", "sub/c.md")]
    assert read_documents(emulator.url("docs", f"{root}/set"), (".md", ".mdx")) == expected
    assert read_documents(emulator.url("docs", f"{root}/set/"), (".md", ".mdx")) == expected
    assert [name for name, _ in read_documents(emulator.url("docs", root), (".md",))] == [
        "set/b.md",
        "set/sub/c.md",
        "settle/x.md",
    ]
    assert read_documents(emulator.url("docs", f"{root}/nothing"), (".md",)) == []


def test_a_folder_in_a_missing_container_says_so(emulator: Azurite):
    with pytest.raises(BlobStorageError, match="there is no container 'nosuchcontainer'"):
        read_documents(emulator.url("nosuchcontainer", "docs/"), (".md",))


class ReplacedOnFirstWrite(io.BytesIO):
    """A download target that, when the first range arrives, has the blob replaced, and waits
    until the new version is committed before taking the bytes."""

    def __init__(self, replace: object) -> None:
        super().__init__()
        self._replace = replace
        self.replaced = threading.Event()

    def write(self, data: object) -> int:  # type: ignore[override]
        if not self.replaced.is_set():
            self.replaced.set()
            self._replace()  # type: ignore[operator]
        return super().write(data)  # type: ignore[arg-type]


def test_a_blob_replaced_in_the_middle_of_a_download_is_read_again_whole(emulator: Azurite, tmp_path: Path):
    url = fresh_url(emulator)
    old, new = pattern(b"old-version", LARGE), pattern(b"new-version", LARGE)
    upload(written(tmp_path / "old", old), url)
    etags: list[str] = []
    into = ReplacedOnFirstWrite(lambda: etags.append(upload(written(tmp_path / "new", new), url)))

    etag = download(url, into)

    assert into.replaced.is_set()
    assert etag == etags[0]
    assert into.getvalue() == new


def test_downloads_racing_uploads_each_return_exactly_one_version_and_its_etag(
    emulator: Azurite, tmp_path: Path
):
    url = fresh_url(emulator)
    versions = [pattern(b"version-a", LARGE), pattern(b"version-b", LARGE)]
    files = [written(tmp_path / f"v{n}", data) for n, data in enumerate(versions)]
    uploaded = {upload(files[0], url): 0}
    rounds = 6
    downloaded_once = threading.Semaphore(0)
    failures: list[BaseException] = []

    def uploader() -> None:
        try:
            for n in range(1, rounds + 1):
                uploaded[upload(files[n % 2], url)] = n % 2
                # Next upload once a download has finished: each download races at most one.
                if not downloaded_once.acquire(timeout=60):
                    raise TimeoutError("no download finished within 60 s")
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=uploader)
    thread.start()
    results: list[tuple[str, bytes]] = []
    try:
        for _ in range(rounds):
            into = io.BytesIO()
            results.append((download(url, into), into.getvalue()))
            downloaded_once.release()
    finally:
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert not failures, failures
    for etag, data in results:
        assert etag in uploaded, "a download returned an ETag no upload made"
        assert data == versions[uploaded[etag]], "a download's bytes are not the version of its ETag"


def test_a_wrong_account_key_is_refused_access_saying_what_to_change(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    url = fresh_url(azurite)
    monkeypatch.setenv(CONNECTION_STRING, azurite.connection_string(WRONG_KEY))
    refused = f"access to {url} was refused"

    for attempt in (
        lambda: blob_version(url),
        lambda: download(url, io.BytesIO()),
        lambda: upload(written(tmp_path / "index", b"x"), url),
    ):
        with pytest.raises(BlobStorageError) as raised:
            attempt()
        assert str(raised.value).startswith(refused)
        assert f"the account key in {CONNECTION_STRING} is not accepted" in str(raised.value)
        assert raised.value.__cause__ is None
    with pytest.raises(BlobStorageError, match=f"access to {azurite.url('docs')} was refused"):
        read_documents(azurite.url("docs"), (".md",))


def test_a_connection_string_for_another_account_is_named(azurite: Azurite, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CONNECTION_STRING, azurite.connection_string().replace(ACCOUNT, "otheraccount"))

    with pytest.raises(BlobStorageError, match=f"{CONNECTION_STRING} is for the account 'otheraccount'"):
        blob_version(fresh_url(azurite))


def test_an_emulator_url_without_a_connection_string_asks_for_one(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(CONNECTION_STRING, raising=False)

    with pytest.raises(BlobStorageError, match=f"needs https; for a local emulator set {CONNECTION_STRING}"):
        blob_version(fresh_url(azurite))


def test_an_unreachable_endpoint_is_named_with_what_to_check(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(blob, "RETRY_TOTAL", 0)
    account_url = f"http://127.0.0.1:{free_port()}/{ACCOUNT}"
    monkeypatch.setenv(CONNECTION_STRING, f"AccountName={ACCOUNT};AccountKey={WRONG_KEY}")

    with pytest.raises(BlobStorageError, match=f"cannot reach {account_url} for {account_url}/c0n/index"):
        blob_version(f"{account_url}/c0n/index")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://acct.blob.core.windows.net/indexes/prod/index.anvilidx", True),
        ("https://acct.blob.core.chinacloudapi.cn/indexes/index.anvilidx", True),
        ("https://acct.privatelink.blob.core.windows.net/indexes/index.anvilidx", True),
        ("https://acct.blob.core.windows.net", True),
        ("http://127.0.0.1:10000/devstoreaccount1/indexes/index.anvilidx", True),
        ("http://azurite:10000/devstoreaccount1/docs/", True),
        ("/var/lib/anvil/index.anvilidx", False),
        ("index.anvilidx", False),
        ("https://example.com/index.anvilidx", False),
        ("C:\\indexes\\index.anvilidx", False),
    ],
)
def test_blob_urls_are_told_from_paths(value: str, expected: bool):
    assert is_blob_url(value) is expected


def test_a_url_is_taken_apart_into_account_container_and_name():
    hosted = parse_blob_url("https://acct.blob.core.windows.net/indexes/prod/my%20index.anvilidx")
    assert (hosted.account_url, hosted.account, hosted.container, hosted.name) == (
        "https://acct.blob.core.windows.net",
        "acct",
        "indexes",
        "prod/my index.anvilidx",
    )
    emulated = parse_blob_url("http://127.0.0.1:10000/devstoreaccount1/docs/guides", prefix=True)
    assert (emulated.account_url, emulated.container, emulated.name) == (
        "http://127.0.0.1:10000/devstoreaccount1",
        "docs",
        "guides/",
    )
    assert parse_blob_url("https://acct.blob.core.windows.net/docs", prefix=True).name == ""


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "https://acct.blob.core.windows.net/",
            "https://acct.blob.core.windows.net/ names no container: "
            "give https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH",
        ),
        ("http://127.0.0.1:10000/", "names no storage account"),
        ("https://acct.blob.core.windows.net/indexes/", "names a container or folder, not a blob"),
        ("https://acct.blob.core.windows.net/Indexes/index", "'Indexes' is not a container name"),
        ("https://acct.blob.core.windows.net/indexes/index?sv=2024&sig=secret", "without it"),
    ],
)
def test_a_url_that_names_no_blob_says_what_to_give(url: str, message: str):
    with pytest.raises(BlobStorageError) as raised:
        parse_blob_url(url)
    assert message in str(raised.value)
    assert "secret" not in str(raised.value)
