"""Workflows: definitions and their versions, runs, the pure evaluator of the DAG rules and the
engine that runs steps as Chrono jobs (docs/workflows.md)."""
