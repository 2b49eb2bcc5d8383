"""Chrono's ground floor: what every other package imports. It imports none of theirs.

Configuration read once from the environment (:mod:`chronocore.config`), tenancy (tenants, API
keys, idempotency records: :mod:`chronocore.models`), the process's Redis client
(:mod:`chronocore.redis_client`), COPY helpers (:mod:`chronocore.pgcopy`), the process runtime
(:mod:`chronocore.runtime`) and the tenant-facing REST primitives that every API of Chrono's
shares: API-key authentication, permissions and the per-tenant rate limit
(:mod:`chronocore.rest`).
"""
