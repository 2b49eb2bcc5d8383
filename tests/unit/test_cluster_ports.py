"""`chrono services cluster-up KIND --ports`: a cluster already there keeps its ports, and
asking for others says what to do (every kind, Redis included, the same rule)."""

from pathlib import Path

import pytest

from localservices.base import refuse_other_ports
from localservices.errors import ServiceStartError


def test_the_ports_a_cluster_has_or_none_asked_are_accepted():
    refuse_other_ports("redis", Path("/d"), (7101, 7102), None)
    refuse_other_ports("redis", Path("/d"), (7101, 7102), [7101, 7102])


def test_other_ports_for_a_running_cluster_are_refused_naming_the_way_out():
    with pytest.raises(ServiceStartError, match=r"listens on \[7101, 7102\], not \[7201, 7202\]"
                       r".*chrono services cluster-down redis"):
        refuse_other_ports("redis", Path("/d"), (7101, 7102), (7201, 7202))
