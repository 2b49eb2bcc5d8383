"""A small billing app with its own Celery app, beat schedule and tasks: see examples/README.md."""
