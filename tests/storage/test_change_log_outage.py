"""A subscriber polls the Redis change log every few milliseconds; while Redis
is away the poll answers False, and the log says so once when it goes and once
when it is back (storage/redis_changes.Outage, shared by the single-server and
the cluster change logs)."""

from __future__ import annotations

import logging

import pytest

from hrm_memory.core.errors import BackendUnavailable
from hrm_memory.storage.redis.changes import Outage


def test_an_outage_is_logged_once_going_and_once_coming_back(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage("Redis at 127.0.0.1:1")
    answers: list[object] = [BackendUnavailable("Redis at 127.0.0.1:1 is unavailable")] * 50 + [True, False, True]

    def probe() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    with caplog.at_level(logging.WARNING):
        seen = [outage.poll(probe) for _ in range(53)]
    assert seen == [False] * 50 + [True, False, True]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "unavailable" in warnings[0] and "resume when it is back" in warnings[0]
    assert warnings[1] == "change log: Redis at 127.0.0.1:1 is back; delivering what was missed"
    assert not outage.down


def test_an_error_that_is_not_an_outage_reaches_the_caller() -> None:
    outage = Outage("Redis at 127.0.0.1:1")

    def probe() -> bool:
        raise ValueError("not an outage")

    with pytest.raises(ValueError):
        outage.poll(probe)
    assert not outage.down
