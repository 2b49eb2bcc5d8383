"""Chrono's REST API (``/api/v1/``): jobs, job actions, bulk ingest, executions, and the platform
administrators' tenants, API keys and workers.

Tenants authenticate with an API key (``Authorization: Bearer chrono_…``) and see only their own
rows; staff users of the admin site use their session. ``docs/api.md`` is the user's guide.
"""
