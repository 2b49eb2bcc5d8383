"""Workflow definitions, runs and the DAG engine (not built yet: see the open workflow issue)."""
