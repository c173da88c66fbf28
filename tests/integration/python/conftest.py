# SPDX-License-Identifier: Apache-2.0
"""Fixtures: a real harmonaized per test module, and a tenant's VM sockets.

ctest sets HZ_HARMONAIZED and HZ_HZCTL (the built daemon and CLI) and a
PYTHONPATH that holds the built harmonaize package.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator, List

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from hz_service import Service  # noqa: E402


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    with Service() as svc:
        yield svc


class Sockets:
    """Fresh VM sockets of tenant 'py' for each group of rank processes: a
    socket serves one front-end at a time, and the service notices a
    process's exit asynchronously."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.count = 0
        service.hzctl("tenant", "create", "py")

    def __call__(self, n: int) -> List[str]:
        paths = []
        for _ in range(n):
            path = os.path.join(self.service.dir, f"py-vm{self.count}.sock")
            self.count += 1
            self.service.hzctl("vm", "bind", "--tenant", "py", "--socket", path)
            paths.append(path)
        return paths


@pytest.fixture(scope="module")
def sockets(service: Service) -> Sockets:
    """sockets(n): n new VM sockets of one tenant."""
    return Sockets(service)
