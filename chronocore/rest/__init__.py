"""The tenant-facing REST primitives every Chrono API shares (``chronoadmin.api``, the audit
search in ``search.api``): API-key authentication, who may call what, and the per-tenant rate
limit. The endpoints themselves live with the package whose data they serve.
"""
