"""Answer engines (embedded retrieval, Azure OpenAI, echo) and the embedders they rank with."""
