"""Hybrid ranking and refusal: the fusion and naming rules on their own, then the embedded engine
over a corpus this test writes, embedded by the real local model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pytest
from support.embedders import Counting
from support.retrieval import engine_of

from app.engines.embeddings.local import LocalEmbedder
from app.engines.retrieval.engine import NO_MATCH_ANSWER, RetrievalEngine
from app.engines.retrieval.follow_ups import cited_page
from app.engines.retrieval.fusion import fuse, lift, rank_fuse, unrelated_quantile
from app.engines.retrieval.refusal import Signals, missing_names, names, subject_terms, verdict
from app.errors import EngineFailed
from app.knowledge.corpus import CorpusPassage
from app.knowledge.index import PassageIndex, add_vectors
from app.knowledge.served import Naming, ServedIndex

pytestmark = pytest.mark.anyio

# A small manual for a made-up tool, so that no model has seen it: each page about one thing.
PAGES = {
    "hooks.md": "# Event hooks\n\nRegister a callable with `add_hook` and Tern calls it for every request "
    "it sends and every response it receives, for logging or for adding headers.\n",
    "limits.md": "# Resource limits\n\nSet `max_connections` to cap how many sockets Tern keeps open "
    "at once, and `max_keepalive` for the idle ones kept for reuse.\n",
    "timeouts.md": "# Timeouts\n\nEvery call gives up after five seconds unless `timeout` says otherwise; "
    "set it to None to wait forever.\n",
    "proxies.md": "# Proxies\n\nRoute traffic through an intermediary server with the `proxy` option, "
    "given as a URL with its scheme.\n",
    "retries.md": "# Retries\n\nA failed connection attempt is tried again up to `retries` times, "
    "waiting longer between each attempt.\n",
    "install.md": "# Installing Tern\n\nInstall Tern from the package index with pip, into a virtual "
    "environment; Python 3.11 or newer is needed.\n",
}


class Past(NamedTuple):
    question: str
    answer: str
    sources: tuple[str, ...] | None = None


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RetrievalEngine]:
    folder = tmp_path_factory.mktemp("tern")
    for name, text in PAGES.items():
        (folder / name).write_text(text, encoding="utf-8")
    embedder = LocalEmbedder()
    built = engine_of(folder, tmp_path_factory.mktemp("cache"), embedder=embedder)
    yield built
    built.index.close()
    embedder.close()


def first_source(answer: object) -> str | None:
    sources = getattr(answer, "sources", ())
    return sources[0].source if sources else None


# --- The rules on their own --------------------------------------------------------------------


def test_names_are_capitalised_words_inside_a_sentence_and_camel_case_words() -> None:
    assert names("How do I use makeAutoObservable in MobX?") == ["makeAutoObservable", "MobX"]
    assert names("I left on Sunday. What does Redux do with Next.js?") == ["Redux", "Next.js"]
    assert names("How do I cap the number of connections?") == []
    # A word after a number is its unit, not a name.
    assert names("Uploads over 16 MB or 2.5 GiB are reset. Why not a 413?") == []
    # Inside a word that starts with a digit, capitals name nothing: not "FA" of "2FA".
    assert names("Can a maintainer approve it with 2FA or a 3D key?") == []
    # The arguments of a call the question quotes are the asker's own values; the call is not.
    assert names("I call logger.info('user', userId) and lose userId. Why?") == ["userId"]
    assert names("Does useStore(selector, shallowEqual) re-render? See connectStore().") == [
        "useStore",
        "connectStore",
    ]


def test_a_passage_strong_in_one_ranking_outranks_one_weak_in_both() -> None:
    index = PassageIndex.from_passages([])
    lexical = np.array([10.0, 4.0, 0.0])
    similarity = np.array([0.80, 0.84, 0.95])
    fused = fuse(lexical, similarity, index)
    # Passage 0 leads by words, 2 by meaning; 1 is second in both and wins neither.
    assert fused.argmax() in (0, 2) and fused[1] < max(fused[0], fused[2])
    # Rank fusion sees only ranks: a passage holding no word of the question gets no lexical rank.
    ranks = rank_fuse(lexical, similarity)
    assert ranks[1] > ranks[2]  # second and second beat third-and-absent plus first


def test_a_follow_up_lifts_the_found_passages_of_the_page_it_follows_when_it_still_answers() -> None:
    index = PassageIndex.from_passages(
        [
            CorpusPassage("a.md", "A", "alpha words"),
            CorpusPassage("b.md", "B", "beta words"),
            CorpusPassage("b.md", "B > More", "more beta words"),
        ]
    )
    b = index.document("b.md")
    assert b is not None and index.document("c.md") is None
    lifted = lift(np.array([2.0, 1.7, -0.5]), index, b)
    # A quarter of the best score for b's found passage; b's passage found by neither stays down.
    assert lifted.tolist() == [2.0, 2.2, -0.5]
    # A page that answers the follow-up clearly less well than the best (under four fifths of
    # its score) is not lifted: the conversation has moved on ("put that on a class-based view").
    assert lift(np.array([2.0, 1.5, -0.5]), index, b).tolist() == [2.0, 1.5, -0.5]
    nothing = np.array([0.0, -1.0, -2.0])
    assert lift(nothing, index, b).tolist() == nothing.tolist()


def test_the_page_an_answer_is_from_is_the_first_corpus_file_it_names() -> None:
    corpus = {"guide/setup.md": 0, "api/Store.md": 1, "faq.md": 2}.get
    assert cited_page("According to guide/setup.md (Install): run it.\n\nSee also: faq.md", corpus) == 0
    assert cited_page("See api/Store.md.", corpus) == 1
    assert cited_page("Edit `config.yaml` as [faq.md](faq.md) says, not app.py.", corpus) == 2
    assert cited_page(NO_MATCH_ANSWER, corpus) is None
    assert cited_page("", corpus) is None


def test_the_unrelated_questions_scores_are_kept_in_the_index(engine: RetrievalEngine) -> None:
    scores = (engine.index.calibration or {})["unrelated"]
    assert len(scores) == 32 and scores == sorted(scores)
    median, high = unrelated_quantile(engine.index, 0.5), unrelated_quantile(engine.index, 0.9)
    assert median is not None and high is not None and median <= high < 1.0


def test_a_name_the_corpus_never_mentions_is_missing(engine: RetrievalEngine) -> None:
    assert missing_names("How does Tern compare with Axios?", engine.index, ()) == ["Axios"]
    assert missing_names("How do I install Tern?", engine.index, ()) == []


def twenty_pages() -> list[CorpusPassage]:
    """Twenty pages of two passages each; only page 7 names Wibble and QX, in its second passage."""
    passages = []
    for page in range(20):
        passages.append(CorpusPassage(f"p{page}.md", f"P{page}", f"opening words of page {page}"))
        later = "later words, with Wibble and QX" if page == 7 else "later words"
        passages.append(CorpusPassage(f"p{page}.md", f"P{page} > More", later))
    return passages


def test_a_rare_name_is_missing_unless_a_found_page_has_it_an_initialism_only_if_absent_and_long() -> None:
    index = PassageIndex.from_passages(twenty_pages())
    # Found: page 7's opening passage, which does not say Wibble; its page does.
    assert missing_names("Does Wibble work here?", index, (0, 2, 14)) == []
    # The pages found (0 to 4) never say it.
    assert missing_names("Does Wibble work here?", index, (0, 1, 2, 4, 6, 8)) == ["Wibble"]
    # An initialism the corpus has is not missing, wherever it is, unless initialisms count
    # (without vectors); one the corpus lacks is missing either way.
    assert missing_names("Does QX work here?", index, (0, 2)) == []
    assert missing_names("Does QX work here?", index, (0, 2), initialisms=True) == ["QX"]
    assert missing_names("Does QX work with ZZZ?", index, (0, 2)) == ["ZZZ"]
    # ... except one of two letters, which abbreviates words more often than it names a product
    # ("the VS Code debugger"), unless initialisms count.
    assert missing_names("Does QX work in VS Code?", index, (0, 2)) == ["Code"]
    assert missing_names("Does QX work in VS Code?", index, (0, 2), initialisms=True) == ["QX", "VS", "Code"]
    # Ranked by words alone, the refusal counts initialisms.
    assert verdict(Signals(ranked=(0, 2)), True, index, "Does QX work here?")
    assert not verdict(Signals(ranked=(0, 14)), True, index, "Does QX work here?")


def test_with_vectors_the_refusal_lets_an_initialism_the_corpus_has_pass() -> None:
    built = PassageIndex.from_passages(twenty_pages())
    arrays, content = built.sections(), dict(built.content)
    add_vectors(arrays, content, Counting())
    index = PassageIndex.of_arrays(arrays, content)
    high = unrelated_quantile(index, 0.9)
    assert high is not None
    # The best passage is clearly more alike than unrelated questions, and holds the words.
    similarity = np.full(index.passage_count, high - 0.1)
    similarity[0] = min(1.0, high + 0.1)
    found = Signals(similarity=similarity, ranked=(0, 2))
    assert not verdict(found, True, index, "Does QX work here?")
    assert verdict(Signals(ranked=(0, 2)), True, index, "Does QX work here?")
    # A name the corpus lacks, or a rare one no page found has, is refused either way.
    assert verdict(found, True, index, "Does QX work with ZZZ?")
    assert verdict(found, True, index, "Does Wibble work here?")


# --- The engine over the corpus ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "page"),
    [
        # Paraphrases that share no informative word with their page's heading.
        ("How can my own function run on each outgoing call and each reply?", "hooks.md"),
        ("How do I limit how many sockets stay open simultaneously?", "limits.md"),
        ("How long does a call wait before it gives up?", "timeouts.md"),
    ],
)
async def test_paraphrases_find_their_page(engine: RetrievalEngine, question: str, page: str) -> None:
    answer = await engine.answer(question, [])
    assert first_source(answer) == page
    assert (await engine.search(question, 3))[0].source == page


@pytest.mark.parametrize(
    "question",
    [
        "What is the tallest mountain in Africa?",
        "How long should I boil an egg for a runny yolk?",
        # Two words of its own, so ranked as a follow-up in a conversation, yet pointing at nothing.
        "How many calories are in a banana?",
        # Shares the corpus's words (proxy, URL) but names a product it never mentions.
        "How do I set a proxy URL in Postman?",
    ],
)
async def test_questions_the_corpus_cannot_answer_are_refused_one_shot_and_in_a_conversation(
    engine: RetrievalEngine, question: str
) -> None:
    one_shot = await engine.answer(question, [])
    assert one_shot.text == NO_MATCH_ANSWER and one_shot.sources == ()
    before = await engine.answer("How do I install Tern?", [])
    later = await engine.answer(question, [Past("How do I install Tern?", before.text)])
    assert later.text == NO_MATCH_ANSWER and later.sources == ()


async def test_a_follow_up_is_ranked_with_the_question_it_follows(engine: RetrievalEngine) -> None:
    first = "How do I route traffic through an intermediary server?"
    answer = await engine.answer(first, [])
    assert first_source(answer) == "proxies.md"
    follow_up = await engine.answer("And what form does it take?", [Past(first, answer.text)])
    assert first_source(follow_up) == "proxies.md"


@pytest.mark.parametrize("page", ["timeouts.md", "retries.md"])
async def test_a_follow_up_stays_on_the_page_the_answer_before_it_cited(
    engine: RetrievalEngine, page: str
) -> None:
    # Both pages wait; alone, "how long does it wait?" after a question about connections finds
    # retries.md. Which one the conversation is about is what the answer before it cited.
    first, then = "What can I set on connections?", "How long does it wait?"
    earlier = Past(first, f"According to {page} ({PAGES[page].splitlines()[0][2:]}): ...")
    assert first_source(await engine.answer(then, [earlier])) == page
    elsewhere = Past(first, "According to install.md (Installing Tern): ...")
    assert first_source(await engine.answer(then, [elsewhere])) == "retries.md"


@pytest.mark.parametrize("page", ["timeouts.md", "retries.md"])
async def test_a_follow_up_stays_on_the_page_the_turn_before_it_kept_as_its_source(
    engine: RetrievalEngine, page: str
) -> None:
    # The turn's sources say which page it was answered from, whatever its text names: an
    # answer written by a language model need not name a file at all.
    first, then = "What can I set on connections?", "How long does it wait?"
    earlier = Past(first, "It says so in install.md, and more.", sources=(page, "install.md"))
    assert first_source(await engine.answer(then, [earlier])) == page
    nothing = Past(first, f"According to {page}: ...", sources=())
    assert first_source(await engine.answer(then, [nothing])) == "retries.md"


async def test_by_words_alone_the_same_engine_misses_a_paraphrase(engine: RetrievalEngine) -> None:
    lexical = RetrievalEngine(engine.index, engine.embedder, ranking="lexical")
    question = "How can my own function run on each outgoing call and each reply?"
    assert first_source(await lexical.answer(question, [])) != "hooks.md"


class Failing:
    """An embedder whose endpoint is down."""

    name = "local:multilingual-e5-small-q4"
    batch_size = 1

    def embed(self, texts: object, *, query: bool) -> np.ndarray:
        raise EngineFailed("Anvil could not reach the embeddings endpoint; ask again in a moment.")

    def close(self) -> None:
        pass


async def test_a_question_that_cannot_be_embedded_is_ranked_by_words(
    engine: RetrievalEngine, caplog: pytest.LogCaptureFixture
) -> None:
    down = RetrievalEngine(engine.index, Failing())
    lexical = RetrievalEngine(engine.index, None)
    question = "How do I install Tern with pip?"
    answer = await down.answer(question, [])
    assert answer == await lexical.answer(question, []) and first_source(answer) == "install.md"
    assert [p.source for p in await down.search(question, 2)] == [
        p.source for p in await lexical.search(question, 2)
    ]
    assert "by words alone, since embedding it failed" in caplog.text


async def test_by_words_alone_a_question_naming_what_the_corpus_lacks_is_refused(
    engine: RetrievalEngine,
) -> None:
    lexical = RetrievalEngine(engine.index, None)
    refused = await lexical.answer("How do I set a proxy URL in Postman?", [])
    assert refused.text == NO_MATCH_ANSWER and refused.sources == ()
    assert first_source(await lexical.answer("How do I set a proxy URL for Tern?", [])) == "proxies.md"


async def test_a_question_naming_what_the_knowledge_is_about_is_not_refused_for_other_names(
    engine: RetrievalEngine,
) -> None:
    # "Tern" is in half the pages (the subject); "docs" only says what kind of collection it is.
    assert subject_terms(engine.index, "Tern docs") == {"tern"}
    assert (
        subject_terms(engine.index, "The proxies docs") == set()
        and subject_terms(engine.index, None) == set()
    )
    question = "How do I set a proxy URL for Tern when testing from Postman?"
    unnamed = RetrievalEngine(engine.index, None)
    assert (await unnamed.answer(question, [])).text == NO_MATCH_ANSWER
    named = RetrievalEngine(ServedIndex(engine.index, None, Naming(name="Tern docs")), None)
    assert first_source(await named.answer(question, [])) == "proxies.md"
    # A question that does not name the subject is still refused for a name the corpus lacks.
    assert (await named.answer("How do I set a proxy URL in Postman?", [])).text == NO_MATCH_ANSWER


async def test_search_returns_no_passage_that_holds_no_word_and_is_as_unrelated_as_the_questions_kept(
    engine: RetrievalEngine,
) -> None:
    assert await engine.search("tallest mountain in Africa", 5) == []
    found = await engine.search("How long does a call wait before it gives up?", 5)
    assert found and found[0].source == "timeouts.md"
