"""End-to-end tests run real beat and worker processes: see the ``platform`` fixture."""

import pytest

pytestmark = pytest.mark.e2e
