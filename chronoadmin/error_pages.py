"""What the web process answers when no view does (404) or a view raised (500).

Under ``/api/`` the answer is JSON, as every other API error is (``{"detail": …}``), so a client
never has to parse an HTML page; elsewhere it is Django's page. A 500 names the request id that
its log line carries (see :mod:`chronoadmin.middleware`), and never the exception itself.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from chronoadmin.middleware import request_id_of

API_PREFIX = "/api/"


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(
            {"detail": f"No API endpoint at {request.path}; the endpoints are listed at "
                       "/api/schema/ and /api/docs/."},
            status=404,
        )
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    request_id = request_id_of(request)
    message = (f"Internal error; it was logged with request id {request_id}. Quote the id when "
               "you report it.")
    if _is_api(request):
        return JsonResponse({"detail": message, "request_id": request_id}, status=500)
    return HttpResponse(
        f"<!doctype html><title>Server error</title><h1>Server error (500)</h1><p>{message}</p>",
        status=500,
    )
