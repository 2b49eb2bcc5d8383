"""Audit events, the outbox, the search-engine client and indexer (not built yet: issue 6)."""
