"""Answer engines: turn a question (and a conversation's earlier turns) into an answer."""
