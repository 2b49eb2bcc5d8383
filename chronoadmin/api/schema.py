"""OpenAPI schema additions: the Bearer API key scheme, the error answers every operation can
give (with their ``Retry-After`` header), and request bodies that refuse unknown fields."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

API_PREFIX = "/api/v1/"
_ERROR_SCHEMA = {
    "type": "object",
    "description": "Either {\"detail\": message} or {field: [messages]} (field-level errors; "
    "'non_field_errors' for the request as a whole).",
    "additionalProperties": True,
}
_RETRY_AFTER = {
    "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}
}
_ERRORS = {
    "400": "Bad input: the message of each field says what to change.",
    "401": "No API key, or an invalid or revoked one.",
    "403": "Authenticated, but this endpoint is for the other kind of caller.",
    "404": "No such object for this tenant (another tenant's id included), or a bad cursor.",
    "405": "Method not allowed.",
    "406": "Not acceptable: ask for application/json.",
    "415": "Unsupported Content-Type: send application/json.",
    "429": "Rate limit (the tenant's, or the client address's for failed authentications and "
    "requests without credentials) or pending-job quota reached; see Retry-After.",
    "503": "The timer store (Redis) did not answer; retry.",
}
_WRITE_ERRORS = {
    "409": "The job's state does not allow this, or the first request with this "
    "Idempotency-Key is still running.",
    "413": "The body, a job's args/kwargs, or a bulk request's item count is over the limit.",
    "422": "This Idempotency-Key was used with a different request.",
}


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "chronocore.rest.authentication.ApiKeyAuthentication"
    name = "TenantApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "chrono_<prefix>_<secret>",
            "description": "A tenant API key, issued by a platform administrator.",
        }


def exclude_aliases(endpoints: list, **kwargs) -> list:
    """Preprocessing hook: leave out the slash-less alias of the bulk endpoint."""
    return [e for e in endpoints if not e[0].endswith("/jobs/bulk")]


def add_error_responses(result: dict, generator, request, public) -> dict:
    """Postprocessing hook: document the errors of every API operation, and forbid unknown
    fields in request bodies (the API refuses them)."""
    for path, operations in result.get("paths", {}).items():
        if not path.startswith(API_PREFIX):
            continue
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            errors = dict(_ERRORS)
            if method in ("post", "patch", "put"):
                errors |= _WRITE_ERRORS
            for code, description in errors.items():
                if code in responses:
                    # The view documents its own body for this status (bulk's 400); the
                    # request-level errors can still answer it.
                    for media in responses[code].get("content", {}).values():
                        media["schema"] = {"anyOf": [media["schema"], _ERROR_SCHEMA]}
                    continue
                response = {
                    "description": description,
                    "content": {"application/json": {"schema": _ERROR_SCHEMA}},
                }
                if code == "429":
                    response["headers"] = _RETRY_AFTER
                responses[code] = response
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            component["additionalProperties"] = False
    return result
