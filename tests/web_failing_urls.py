"""A URL map for the tests of the web process's error handling: Chrono's own, plus one view that
raises, so a test can see what a real 500 leaves in the log and in the response."""

from __future__ import annotations

from django.urls import path

from chronoadmin.urls import handler404, handler500, urlpatterns  # noqa: F401 - handlers used


class ViewFailed(RuntimeError):
    """Raised by the failing view on purpose."""


def failing_view(request):
    raise ViewFailed("deliberate failure for the error-handling test")


urlpatterns = [*urlpatterns, path("api/v1/test-failure/", failing_view),
               path("test-failure/", failing_view)]
