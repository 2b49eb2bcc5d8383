"""Audit events: the outbox (models, audit), the search-engine client, the index template and
retention policies, the indexer, the search API and admin page, and the Kibana saved objects."""
