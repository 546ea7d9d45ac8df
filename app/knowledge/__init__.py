"""The knowledge index: readers, the index artifact, and building and opening it."""
