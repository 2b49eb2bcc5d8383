"""The error fields of an audit document, from what a worker or the reaper recorded."""

from __future__ import annotations

import pytest

from search.documents import error_fields


@pytest.mark.parametrize(("text", "fields"), [
    ("billing.errors.CardDeclined: card 4242 declined",
     {"type": "billing.errors.CardDeclined", "message": "card 4242 declined"}),
    ("ValueError: boom", {"type": "ValueError", "message": "boom"}),
    ("StopIteration", {"type": "StopIteration", "message": "StopIteration"}),
    ("lost: attempt 2 on worker w1 stopped renewing its lease",
     {"message": "lost: attempt 2 on worker w1 stopped renewing its lease"}),
])
def test_a_one_line_error_names_its_type_when_it_has_one(text, fields):
    assert error_fields(text) == fields
