"""The one write semantics: a document version applied to a realm's graph in a transaction."""
