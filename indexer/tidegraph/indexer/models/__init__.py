"""Model endpoints: the OpenAI-compatible client, its errors and metrics, and the embedders."""
