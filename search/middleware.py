"""Makes the web request being served known to :func:`search.audit.current_actor`.

Audit rows name who asked for a change. Views pass it explicitly where they know it; everywhere
else (a REST view calling ``scheduler.api.pause`` without ``by=``, an admin action) the actor is
read from the request's authentication at the moment the row is written. DRF authenticates inside
the view, after middleware ran, but copies ``user`` and ``auth`` onto the Django request, so the
request itself (not a value computed here) is what this middleware makes available.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from search import audit


class AuditActorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with audit.serving(request):
            return self.get_response(request)
