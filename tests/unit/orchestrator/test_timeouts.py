"""Request timeouts on one loop timer: each open item expires once, in deadline order."""

import asyncio

from orchestrator.timeouts import COMPACT_AT, Timeouts


class Requests:
    def __init__(self) -> None:
        self.open: set[str] = set()
        self.expired: list[str] = []
        self.timeouts = Timeouts(self.open.__contains__, self.expire)

    def add(self, name: str, seconds: float) -> None:
        self.open.add(name)
        self.timeouts.add(name, seconds, len(self.open))

    def expire(self, name: str) -> None:
        self.open.discard(name)
        self.expired.append(name)


async def test_open_items_expire_once_in_deadline_order():
    requests = Requests()
    requests.add("late", 0.05)
    requests.add("early", 0.01)  # shorter than the one before: the timer moves earlier
    requests.add("answered", 0.02)
    requests.open.discard("answered")
    await asyncio.sleep(0.03)
    assert requests.expired == ["early"]
    await asyncio.sleep(0.05)
    assert requests.expired == ["early", "late"]
    await asyncio.sleep(0.02)
    assert requests.expired == ["early", "late"]


class Retrying(Requests):
    """Sends a second request when the first times out (as a tool that retries would)."""

    def expire(self, name: str) -> None:
        super().expire(name)
        if name == "first":
            self.add("second", 0.01)


async def test_an_item_added_when_one_expires_is_watched_too():
    requests = Retrying()
    requests.add("first", 0.01)
    await asyncio.sleep(0.06)
    assert requests.expired == ["first", "second"]


async def test_answered_items_do_not_pile_up():
    requests = Requests()
    for i in range(10 * COMPACT_AT):
        requests.add(str(i), 60.0)
        requests.open.discard(str(i))  # answered at once, as nearly every request is
    assert len(requests.timeouts) <= COMPACT_AT + 2
    requests.add("still open", 0.01)
    await asyncio.sleep(0.04)
    assert requests.expired == ["still open"]
