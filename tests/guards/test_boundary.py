"""@bounded / bounded_sync, ToolRegistry and ToolRunner: the seed's boundary quickstart and rules."""

from __future__ import annotations

import pytest

from mycelium import (
    ToolBoundaryError,
    ToolBoundaryExhaustedError,
    ToolRegistry,
    ToolRunner,
    bounded,
    bounded_sync,
)

FETCH_CUSTOMER_SCHEMA = {"customer_id": {"type": "string", "required": True, "pattern": r"^c\d+$"}}
CUSTOMER_RECORD_SCHEMA = {
    "customer_id": {"type": "string", "required": True},
    "name": {"type": "string", "required": True},
}
DB = {"c1": {"customer_id": "c1", "name": "Alice"}, "c2": {"customer_id": "c2"}}


def refused(fn, *args, **kwargs) -> ToolBoundaryError:
    with pytest.raises(ToolBoundaryError) as exc:
        fn(*args, **kwargs)
    return exc.value


def test_the_seed_sync_boundary_checks_inputs_before_the_body_runs():
    ran = []

    @bounded_sync(schema=FETCH_CUSTOMER_SCHEMA)
    def fetch_customer(customer_id: str) -> dict:
        ran.append(customer_id)
        return DB[customer_id]

    assert fetch_customer(customer_id="c1")["name"] == "Alice"
    assert fetch_customer("c1")["name"] == "Alice"  # positional arguments are checked too
    err = refused(fetch_customer, customer_id="customer-1")
    assert (err.violation, err.field, err.tool_name) == ("pattern_mismatch", "customer_id", "fetch_customer")
    assert "customer_id" in err.llm_message and "'customer-1'" in err.llm_message
    assert "^c\\\\d+$" in err.llm_message or r"^c\d+$" in err.llm_message
    assert refused(fetch_customer).violation == "missing_required_field"
    null = refused(fetch_customer, customer_id=None)
    assert null.violation == "type_mismatch" and "null" in null.llm_message
    unexpected = refused(fetch_customer, customer_id="c1", ids=[1])  # not a TypeError from the body
    assert (unexpected.violation, unexpected.field) == ("unexpected_kwarg", "ids")
    assert refused(fetch_customer, customer_id=7).violation == "type_mismatch"
    assert ran == ["c1", "c1"]


def test_each_field_spec_key():
    @bounded_sync(schema={
        "name": {"type": "string", "min_length": 2, "max_length": 5},
        "count": {"type": "integer"},
        "price": {"type": "number", "required": True},
        "flag": {"type": "boolean"},
    })
    def tool(price: float, name: str = "ab", count: int = 1, flag: bool = False) -> dict:
        return {}

    assert tool(price=1) == {} and tool(price=1.5, count=3, flag=True) == {}
    assert refused(tool, price=1, name="a").violation == "too_short"
    assert refused(tool, price=1, name="abcdef").violation == "too_long"
    assert refused(tool, price=1, count=1.5).violation == "type_mismatch"
    assert refused(tool, price=True).violation == "type_mismatch"  # a bool is not a number
    assert refused(tool, price=1, count=True).violation == "type_mismatch"
    assert refused(tool, price=1, flag="yes").violation == "type_mismatch"
    assert refused(tool).violation == "missing_required_field"


def test_arrays_with_items_and_objects():
    @bounded_sync(schema={"ids": {"type": "array", "items": {"type": "integer"}, "required": True,
                                  "max_length": 3},
                          "options": {"type": "object"}})
    def tool(ids: list, options: dict | None = None) -> int:
        return len(ids)

    assert tool(ids=[1, 2, 3], options={"a": 1}) == 3
    assert refused(tool, ids=[1, "2"]).violation == "type_mismatch"
    assert refused(tool, ids=[1, 2, 3, 4]).violation == "too_long"
    assert refused(tool, ids=[1], options=[1]).violation == "type_mismatch"
    assert refused(tool).violation == "missing_required_field"
    with pytest.raises(ValueError, match="items applies to type: array"):
        bounded_sync(schema={"a": {"type": "string", "items": {"type": "string"}}})


def test_symbolic_links_cannot_leave_an_allowed_folder_and_loops_are_refused(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("keep")
    (allowed / "escape").symlink_to(outside, target_is_directory=True)
    (allowed / "loop-a").symlink_to(allowed / "loop-b")
    (allowed / "loop-b").symlink_to(allowed / "loop-a")
    (allowed / "ok.txt").write_text("fine")
    ran = []

    @bounded_sync(allowed_paths=[str(allowed)])
    def read(path: str) -> str:
        ran.append(path)
        return open(path).read()

    assert read(path=str(allowed / "ok.txt")) == "fine"
    for path in (allowed / "escape" / "secret.txt", allowed / "loop-a" / "x"):
        assert refused(read, path=str(path)).violation == "scope_path"
    assert ran == [str(allowed / "ok.txt")]


def test_a_wrong_schema_is_refused_when_decorating():
    with pytest.raises(ValueError, match="minimum"):
        bounded_sync(schema={"a": {"type": "string", "minimum": 1}})
    with pytest.raises(ValueError, match="'str'"):
        bounded_sync(schema={"a": {"type": "str"}})
    with pytest.raises(ValueError, match="pattern"):
        bounded_sync(schema={"a": {"pattern": "("}})


def test_scope_entity_pattern_and_allowed_paths():
    @bounded_sync(entity_param="customer_id", entity_pattern=r"c\d+", allowed_paths=["/workspace/src/"])
    def read(customer_id: str, path: str) -> str:
        return path

    assert read(customer_id="c9", path="/workspace/src/app.py") == "/workspace/src/app.py"
    assert read(customer_id="c9", path="/workspace/src") == "/workspace/src"
    err = refused(read, customer_id="x9", path="/workspace/src/a")
    assert err.violation == "scope_entity_pattern" and "customer_id" in err.llm_message
    for path in ("/etc/passwd", "/workspace/src/../../etc/passwd", "/workspace/srcevil/a", "src/a"):
        err = refused(read, customer_id="c1", path=path)
        assert err.violation == "scope_path", path
        assert "/workspace/src/" in err.llm_message


def test_an_invalid_result_is_not_returned():
    @bounded_sync(schema=FETCH_CUSTOMER_SCHEMA, output_schema=CUSTOMER_RECORD_SCHEMA)
    def fetch_customer(customer_id: str) -> dict:
        return DB[customer_id]

    assert fetch_customer(customer_id="c1")["name"] == "Alice"
    err = refused(fetch_customer, customer_id="c2")
    assert (err.violation, err.field) == ("output_validation_failed", "name")
    assert "returned invalid output" in err.llm_message

    @bounded_sync(output_schema=CUSTOMER_RECORD_SCHEMA)
    def listing() -> list:
        return []

    assert refused(listing).violation == "output_validation_failed"


async def test_the_seed_async_quickstart_with_registry_and_runner():
    registry = ToolRegistry(allowed=["fetch_customer"])

    @registry.register
    @bounded(schema=FETCH_CUSTOMER_SCHEMA, output_schema=CUSTOMER_RECORD_SCHEMA,
             allowed_paths=["/workspace/src/"])
    async def fetch_customer(customer_id: str) -> dict:
        return DB[customer_id]

    runner = ToolRunner(registry=registry)
    assert (await runner.call(fetch_customer, customer_id="c1"))["name"] == "Alice"

    with pytest.raises(TypeError, match="bounded_sync"):
        @bounded(schema=FETCH_CUSTOMER_SCHEMA)
        def plain(customer_id: str) -> None: ...


def test_the_registry_allow_list():
    registry = ToolRegistry(allowed=["search_docs", "summarize"])
    registry.validate_call("search_docs")
    err = refused(registry.validate_call, "fetch_customer")
    assert err.violation == "not_in_allowlist"
    assert "search_docs, summarize" in err.llm_message
    assert "none configured" in refused(ToolRegistry().validate_call, "x").llm_message


async def test_output_failures_retry_the_tool_up_to_max_tool_retries():
    calls = 0

    @bounded(schema=FETCH_CUSTOMER_SCHEMA, output_schema=CUSTOMER_RECORD_SCHEMA)
    async def fetch_customer(customer_id: str) -> dict:
        nonlocal calls
        calls += 1
        return {"customer_id": customer_id} if calls < 3 else DB["c1"]

    assert (await ToolRunner(max_tool_retries=3).call(fetch_customer, customer_id="c1"))["name"] == "Alice"
    assert calls == 3
    calls = -10
    with pytest.raises(ToolBoundaryError):
        await ToolRunner(max_tool_retries=2).call(fetch_customer, customer_id="c1")
    assert calls == -8


async def test_input_failures_go_back_to_the_model_with_the_error():
    seen: list[list] = []

    @bounded(schema=FETCH_CUSTOMER_SCHEMA)
    async def fetch_customer(customer_id: str) -> dict:
        return DB[customer_id]

    async def invoke_llm(messages: list) -> dict:  # one new assistant message, like llm.ainvoke
        seen.append(list(messages))
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_2", "name": "fetch_customer", "args": {"customer_id": "c1"}}]}

    def parse_tool_kwargs(messages: list, tool_name: str) -> dict:
        assert tool_name == "fetch_customer"
        return messages[-1]["tool_calls"][-1]["args"]

    result, messages = await ToolRunner(max_llm_retries=2).run_with_llm_retry(
        fetch_customer, messages=[{"role": "user", "content": "get c1"}], tool_call_id="call_1",
        kwargs={"customer_id": "one"}, invoke_llm=invoke_llm, parse_tool_kwargs=parse_tool_kwargs)
    assert result["name"] == "Alice"
    error = seen[0][-1]
    assert error["role"] == "tool" and error["tool_call_id"] == "call_1"
    assert "failed input validation" in error["content"]
    assert messages[-1]["tool_calls"][0]["id"] == "call_2"


async def test_retries_used_up_raise_exhausted_with_the_last_error():
    llm_calls = 0

    @bounded(schema=FETCH_CUSTOMER_SCHEMA)
    async def fetch_customer(customer_id: str) -> dict:
        return DB[customer_id]

    def invoke_llm(messages: list) -> list:  # a sync model returning the whole list works too
        nonlocal llm_calls
        llm_calls += 1
        return messages

    with pytest.raises(ToolBoundaryExhaustedError) as exc:
        await ToolRunner(registry=ToolRegistry(["fetch_customer"]), max_llm_retries=2).run_with_llm_retry(
            fetch_customer, messages=[], tool_call_id="call_1", kwargs={"customer_id": "bad"},
            invoke_llm=invoke_llm, parse_tool_kwargs=lambda m, n: {"customer_id": "still-bad"})
    assert llm_calls == 2 and exc.value.last_error.violation == "pattern_mismatch"


def test_the_sync_runner_and_allow_list_failures_retry_through_the_model():
    @bounded_sync(schema=FETCH_CUSTOMER_SCHEMA)
    def fetch_customer(customer_id: str) -> dict:
        return DB[customer_id]

    runner = ToolRunner(registry=ToolRegistry(allowed=["other"]), max_llm_retries=1)
    with pytest.raises(ToolBoundaryExhaustedError) as exc:
        runner.run_with_llm_retry_sync(fetch_customer, messages=[], tool_call_id="c", kwargs={"customer_id": "c1"},
                                       invoke_llm=lambda m: m, parse_tool_kwargs=lambda m, n: {"customer_id": "c1"})
    assert exc.value.last_error.violation == "not_in_allowlist"
    assert ToolRunner().call_sync(fetch_customer, customer_id="c1")["name"] == "Alice"
