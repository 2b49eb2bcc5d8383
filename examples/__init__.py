"""Example applications that use Chrono the way an existing Django + Celery project would."""
