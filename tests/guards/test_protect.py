"""@protect / protect_sync / Session: hits, misses, per-entity keys, staleness, errors, isolation."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mycelium import Session, protect, protect_sync
from mycelium.guards.session import default_cache


@pytest.fixture(autouse=True)
def _empty_default_cache():
    default_cache.clear()
    yield
    default_cache.clear()


def counting_sync(**options):
    calls: list[str] = []

    @protect_sync(**options)
    def fetch_customer(customer_id: str, verbose: bool = False) -> dict:
        calls.append(customer_id)
        if customer_id == "boom":
            raise RuntimeError("db down")
        return {"customer_id": customer_id, "n": len(calls)}

    return fetch_customer, calls


def test_the_seed_sync_quickstart_caches_per_entity_within_a_session():
    fetch_customer, calls = counting_sync(entity_param="customer_id", ttl=60)
    with Session():
        first = fetch_customer(customer_id="c1")
        assert fetch_customer(customer_id="c1") is first  # a hit: the tool did not run
        assert fetch_customer("c1") is first  # the entity given by position is the same key
        fetch_customer(customer_id="c2")
    assert calls == ["c1", "c2"]


def test_a_stale_entry_is_refetched():
    fetch_customer, calls = counting_sync(entity_param="customer_id", ttl=0.05)
    with Session():
        fetch_customer(customer_id="c1")
        fetch_customer(customer_id="c1")
        time.sleep(0.08)
        again = fetch_customer(customer_id="c1")
    assert calls == ["c1", "c1"] and again["n"] == 2


def test_an_error_clears_the_entry_and_is_not_cached():
    state = {"fail": False, "calls": 0}

    @protect_sync(entity_param="customer_id", ttl=60)
    def fetch_customer(customer_id: str) -> dict:
        state["calls"] += 1
        if state["fail"]:
            raise RuntimeError("db down")
        return {"v": state["calls"]}

    with Session() as session:
        assert fetch_customer(customer_id="c1") == {"v": 1}
        session.cache.set(next(iter(session.cache._entries)), {"v": "poisoned"}, -1)  # expire it
        state["fail"] = True
        with pytest.raises(RuntimeError):
            fetch_customer(customer_id="c1")
        assert len(session.cache) == 0
        state["fail"] = False
        assert fetch_customer(customer_id="c1") == {"v": 3}  # refetched after the error


def test_a_none_result_is_a_hit_too():
    calls = []

    @protect_sync(entity_param="key")
    def lookup(key: str) -> None:
        calls.append(key)

    with Session():
        lookup(key="a")
        lookup(key="a")
    assert calls == ["a"]


def test_sessions_do_not_share_entries_and_the_default_cache_is_separate():
    fetch_customer, calls = counting_sync(entity_param="customer_id", ttl=60)
    with Session():
        fetch_customer(customer_id="c1")
        fetch_customer(customer_id="c1")
    with Session():
        fetch_customer(customer_id="c1")
    fetch_customer(customer_id="c1")  # outside a session: the process default cache
    fetch_customer(customer_id="c1")
    assert calls == ["c1", "c1", "c1"]


def test_a_nested_session_has_its_own_cache_and_the_outer_one_resumes():
    fetch_customer, calls = counting_sync(entity_param="customer_id", ttl=60)
    with Session():
        fetch_customer(customer_id="c1")
        with Session():
            fetch_customer(customer_id="c1")
        fetch_customer(customer_id="c1")
    assert calls == ["c1", "c1"]


def test_threads_each_in_a_session_are_isolated():
    fetch_customer, calls = counting_sync(entity_param="customer_id", ttl=60)
    barrier = threading.Barrier(4)

    def worker() -> None:
        with Session():
            barrier.wait()
            fetch_customer(customer_id="shared")
            fetch_customer(customer_id="shared")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["shared"] * 4


def test_without_entity_param_one_result_is_cached_per_tool():
    fetch_customer, calls = counting_sync(ttl=60)
    with Session():
        fetch_customer(customer_id="c1")
        fetch_customer(customer_id="c2")
    assert calls == ["c1"]


def test_an_unhashable_entity_is_keyed_by_its_repr():
    calls = []

    @protect_sync(entity_param="query")
    def search(query: dict) -> int:
        calls.append(query)
        return len(calls)

    with Session():
        assert search(query={"a": 1}) == search(query={"a": 1}) == 1
        assert search(query={"a": 2}) == 2


async def test_the_seed_async_quickstart_and_concurrent_sessions():
    calls: list[str] = []

    @protect(entity_param="customer_id", ttl=60)
    async def fetch_customer(customer_id: str) -> dict:
        calls.append(customer_id)
        await asyncio.sleep(0.01)
        return {"customer_id": customer_id}

    async def handle_request(customer_id: str) -> dict:
        async with Session():
            await fetch_customer(customer_id=customer_id)
            return await fetch_customer(customer_id=customer_id)

    results = await asyncio.gather(handle_request("c1"), handle_request("c1"), handle_request("c2"))
    assert [r["customer_id"] for r in results] == ["c1", "c1", "c2"]
    assert sorted(calls) == ["c1", "c1", "c2"]  # each request its own cache, each a hit on its second call


async def test_async_errors_clear_and_staleness_refetch():
    state = {"calls": 0, "fail": False}

    @protect(entity_param="k", ttl=0.05)
    async def get(k: str) -> int:
        state["calls"] += 1
        if state["fail"]:
            raise ValueError("bad")
        return state["calls"]

    async with Session():
        assert await get(k="x") == 1
        assert await get(k="x") == 1
        await asyncio.sleep(0.08)
        assert await get(k="x") == 2
        state["fail"] = True
        await asyncio.sleep(0.08)
        with pytest.raises(ValueError):
            await get(k="x")
        state["fail"] = False
        assert await get(k="x") == 4


def test_the_wrong_decorator_kind_and_bad_options_are_refused():
    with pytest.raises(TypeError, match="protect_sync"):
        @protect()
        def plain() -> None: ...

    with pytest.raises(TypeError, match="@protect"):
        @protect_sync()
        async def coro() -> None: ...

    with pytest.raises(ValueError, match="ttl"):
        protect_sync(ttl=0)
