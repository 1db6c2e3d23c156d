"""Arguments of the wrong kind get the package's typed errors, sync and async:
never an AttributeError, a TypeError or a bare ValueError from inside."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hrm_memory import (
    AsyncMemoryManager,
    HistoryNotKept,
    InvalidArgument,
    MemoryManager,
    MemoryStoreError,
    UnknownConsentCategory,
)

NOT_CATEGORIES = [None, 5, b"conversation", ["conversation"], "bogus", ""]


@pytest.mark.parametrize("category", NOT_CATEGORIES, ids=repr)
def test_consent_questions_about_a_non_category_are_refused(tmp_path: Path, category: Any) -> None:
    with MemoryManager(tmp_path) as mm:
        for ask in (mm.consent.granted, mm.consent.namespaces, mm.consent.grant, mm.consent.revoke):
            with pytest.raises(UnknownConsentCategory) as err:
                ask(category)
            assert isinstance(err.value, ValueError)

        async def main() -> None:
            async with AsyncMemoryManager(manager=mm) as amm:
                for ask in (amm.consent.granted, amm.consent.namespaces, amm.consent.grant, amm.consent.revoke):
                    with pytest.raises(UnknownConsentCategory):
                        await ask(category)

        asyncio.run(main())


@pytest.mark.parametrize("manager", ["x", 5, object()], ids=["'x'", "5", "object()"])
def test_the_async_twin_takes_only_a_manager(manager: Any) -> None:
    with pytest.raises(InvalidArgument):
        AsyncMemoryManager(manager=manager)


@pytest.mark.parametrize("sections", [5, [5], [["patterns"]], {"patterns": 1}, b"patterns"], ids=repr)
def test_context_sections_of_the_wrong_kind_are_refused(tmp_path: Path, sections: Any) -> None:
    with MemoryManager(tmp_path) as mm:
        with pytest.raises(InvalidArgument):
            mm.context("altitude", sections=sections)

        async def main() -> None:
            async with AsyncMemoryManager(manager=mm) as amm:
                with pytest.raises(InvalidArgument):
                    await amm.context("altitude", sections=sections)

        asyncio.run(main())


@pytest.mark.parametrize("ops", [None, 5, "ops", {"a": 1}], ids=repr)
def test_a_batch_of_no_ops_is_refused(tmp_path: Path, ops: Any) -> None:
    with MemoryManager(tmp_path) as mm:
        with pytest.raises(InvalidArgument):
            mm.batch(ops)

        async def main() -> None:
            async with AsyncMemoryManager(manager=mm) as amm:
                with pytest.raises(InvalidArgument):
                    await amm.batch(ops)

        asyncio.run(main())


UTC = timezone.utc
EXTREMES = [
    datetime.max.replace(tzinfo=UTC),
    datetime.min.replace(tzinfo=UTC),
    datetime.max.replace(tzinfo=timezone(timedelta(hours=-14))),  # past 9999 in UTC
    datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),  # before year 1 in UTC
    datetime.max.replace(tzinfo=timezone(timedelta(hours=14))),
]


@pytest.mark.parametrize("when", EXTREMES, ids=repr)
def test_as_of_at_the_ends_of_time_answers_or_is_refused_typed(tmp_path: Path, when: datetime) -> None:
    with MemoryManager(tmp_path) as mm:
        mm.write("shared.people", "ann", {"role": "lead"})
        for ask in (lambda: mm.query("shared.*", as_of=when), lambda: mm.read("shared.people", "ann", as_of=when),
                    lambda: mm.get_record("shared.people", "ann", as_of=when)):
            try:
                ask()
            except (InvalidArgument, HistoryNotKept):
                pass
            except MemoryStoreError as exc:
                raise AssertionError(f"{type(exc).__name__}: {exc}") from exc
        # The last microsecond of 9999 is after every write: the current value.
        assert mm.read("shared.people", "ann", as_of=datetime.max.replace(tzinfo=UTC)) == {"role": "lead"}
