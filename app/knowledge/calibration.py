"""What the corpus itself says an unrelated question scores, for knowing when it does not know.

How alike a question and a passage look (their vectors' cosine) depends on the model and on the
corpus: a small corpus of prose scores lower for every question than a large one of code. So when
an index is built, questions that no documentation set answers (the weather, cooking, sport,
history, music, gardening, repairs) are asked of its own passages, and the best similarity each
reaches is kept in the index. A question whose best passage scores no higher than those is as
unrelated as they are. A few of them may be on topic for some corpus (one about gardening); the
rule reads their upper quantiles, which a few cannot move much.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.knowledge.vectors import PassageEmbedder, Vectors

#: Questions about everyday things no software, product or handbook documentation covers.
UNRELATED = (
    "What is the tallest mountain in South America?",
    "How long should I roast a whole chicken?",
    "Who won the football world cup in 1998?",
    "How do I get rid of aphids on my roses?",
    "What is the capital city of Australia?",
    "How often should I change the brake pads on my car?",
    "What are the first symptoms of the flu?",
    "How do I train a puppy to sit?",
    "What is a good recipe for banana bread?",
    "When did the first moon landing happen?",
    "How do I tune an acoustic guitar?",
    "How much should I save each month for retirement?",
    "How many players are on a basketball team?",
    "How do I remove a red wine stain from a carpet?",
    "What causes the northern lights?",
    "How do I knit a scarf for a beginner?",
    "Which planets in the solar system have rings?",
    "How do I fix a dripping kitchen tap?",
    "What happens at the end of Hamlet?",
    "How often should I water a cactus?",
    "How fast does sound travel in air?",
    "How do I make cold brew coffee at home?",
    "Who painted the ceiling of the Sistine Chapel?",
    "How do I season a cast iron pan?",
    "What is the population of Brazil?",
    "How do I wax a snowboard?",
    "How is a cricket match scored?",
    "What foods lower cholesterol?",
    "How can you tell a crocodile from an alligator?",
    "How do I bleed a radiator?",
    "Why was the Eiffel Tower built?",
    "When should I prune an apple tree?",
)


def calibrate(vectors: Vectors, embedder: PassageEmbedder) -> dict[str, Any]:
    """The best similarity each unrelated question reaches among `vectors`, ascending."""
    if not len(vectors):
        return {"unrelated": []}
    questions = embedder.embed(UNRELATED, query=True)
    best = np.max(questions @ vectors.T, axis=1)
    return {"unrelated": sorted(round(float(score), 4) for score in best)}
