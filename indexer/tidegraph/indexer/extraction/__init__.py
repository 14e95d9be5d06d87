"""Preparation: a document version turned into chunks, gated structure and embeddings."""
