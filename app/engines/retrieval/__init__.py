"""The embedded answer engine and all of ranking: lexical scores, fusion with vectors, the
reordering, refusal, follow-ups, and the composition of an answer from the passages found."""
