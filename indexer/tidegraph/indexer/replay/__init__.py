"""Rebuilding a realm from the documents topic into a shadow schema, then swapping it in."""
