"""``MessageValidator``: catch a broken transcript before it is sent to the model.

Messages are OpenAI-style dicts (``role``, ``content``, ``tool_calls``, ``tool_call_id``) or
LangChain message objects (``type`` human/ai/system/tool). Violations, by key:

=========================== ========================================================= ===========
violation                   what is wrong                                             ``repair``
=========================== ========================================================= ===========
invalid_role                a role outside system/user/assistant/tool/function        raises
missing_tool_call_id        a tool result without ``tool_call_id``                    raises
duplicate_tool_call_blocks  streaming left partial ``fc_*`` beside final ``call_*``   drops fc_*
duplicate_tool_call_ids     one assistant message repeats a tool-call id              keeps last
nonzero_tool_call_index     tool-call ``index`` starting at 1 (or later) not 0        renumbers
parsed_artifact             a structured-output ``parsed`` field left in the history  strips it
orphaned_tool_result        a tool result whose call no earlier assistant made        drops it
duplicate_tool_result       two results for one tool-call id                          keeps first
=========================== ========================================================= ===========

``validate`` raises :class:`MessageValidationError` at the first violation and returns the list
unchanged; ``repair`` returns a fixed list (the input and its messages are never mutated) and
raises only for what cannot be inferred.
"""

from __future__ import annotations

from collections import deque
from typing import Any

VALID_ROLES = frozenset({"system", "user", "assistant", "tool", "function"})
_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
                    "function": "function", "chat": "user"}


class MessageValidationError(Exception):
    """A structural error in the transcript: ``.violation`` (a key above) and ``.message_index``."""

    def __init__(self, reason: str, violation: str, message_index: int = -1) -> None:
        super().__init__(reason)
        self.violation = violation
        self.message_index = message_index


def role_of(msg: Any) -> str:
    if isinstance(msg, dict):
        return str(msg.get("role", ""))
    kind = getattr(msg, "type", None)
    if isinstance(kind, str):
        return _LANGCHAIN_ROLES.get(kind, kind)
    return str(getattr(msg, "role", ""))


def _get(msg: Any, key: str) -> Any:
    return msg.get(key) if isinstance(msg, dict) else getattr(msg, key, None)


def tool_call_id_of(tc: Any) -> str | None:
    value = tc.get("id") if isinstance(tc, dict) else getattr(tc, "id", None)
    return value if isinstance(value, str) and value else None


def _index_of(tc: Any) -> int | None:
    value = tc.get("index") if type(tc) is dict else None
    if value is None or type(value) is int:
        return value
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else None


def _mixed_blocks(calls: list[Any]) -> bool:
    ids = [tool_call_id_of(tc) or "" for tc in calls]
    return any(i.startswith("fc_") for i in ids) and any(i.startswith("call_") for i in ids)


def _repeats(calls: list[Any]) -> bool:
    ids = [i for i in map(tool_call_id_of, calls) if i]
    return len(ids) != len(set(ids))


class MessageValidator:
    """Validate (raise) or repair (fix a copy) a message list.

    ``strict_roles``: an unknown role is a violation (default true); ``check_indices``: check tool-call
    index sequences; ``check_parsed``: check for ``parsed`` structured-output artifacts.
    """

    def __init__(
        self, strict_roles: bool = True, check_indices: bool = True, check_parsed: bool = True
    ) -> None:
        self._strict_roles = strict_roles
        self._check_indices = check_indices
        self._check_parsed = check_parsed
        self._audit: deque[dict[str, Any]] = deque(maxlen=1000)

    def audit_log(self) -> list[dict[str, Any]]:
        """Validation and repair events (the latest 1000)."""
        return list(self._audit)

    # -- validate ----------------------------------------------------------------------------------

    def validate(self, messages: list[Any]) -> list[Any]:
        """Raise :class:`MessageValidationError` at the first violation; else return ``messages``."""
        called: set[str] = set()
        answered: set[str] = set()
        strict, indices, parsed = self._strict_roles, self._check_indices, self._check_parsed
        for i, msg in enumerate(messages):
            plain = type(msg) is dict
            role = msg.get("role", "") if plain else role_of(msg)
            if strict and role not in VALID_ROLES:
                self._fail("invalid_role", i, f"message {i} has role {role!r}; expected one of "
                           f"{', '.join(sorted(VALID_ROLES))}")
            calls = msg.get("tool_calls") if plain else getattr(msg, "tool_calls", None)
            if calls:
                ids = [tc.get("id") if type(tc) is dict else tool_call_id_of(tc) for tc in calls]
                named = [x for x in ids if x]
                if any(x.startswith("fc_") for x in named) and any(x.startswith("call_") for x in named):
                    self._fail("duplicate_tool_call_blocks", i, f"message {i} holds both partial fc_* and "
                               "final call_* tool-call blocks (a streaming artifact); repair() drops fc_*")
                if len(set(named)) != len(named):
                    self._fail("duplicate_tool_call_ids", i, f"message {i} repeats a tool-call id: {ids}")
                if indices:
                    first = next((x for x in map(_index_of, calls) if x is not None), None)
                    if first not in (None, 0):
                        self._fail("nonzero_tool_call_index", i, f"message {i}'s tool calls start at index "
                                   f"{first}, not 0 (results would be matched to the wrong call)")
                if role == "assistant":
                    called.update(named)
            elif role == "tool":
                tcid = msg.get("tool_call_id") if plain else getattr(msg, "tool_call_id", None)
                if not tcid:
                    self._fail("missing_tool_call_id", i, f"message {i} is a tool result without a "
                               "tool_call_id; the model cannot match it to its call")
                if tcid not in called:
                    self._fail("orphaned_tool_result", i, f"message {i} answers tool call {tcid!r}, which "
                               "no earlier assistant message made (dropped or corrupted)")
                if tcid in answered:
                    self._fail("duplicate_tool_result", i, f"message {i} is a second result for tool call "
                               f"{tcid!r}")
                answered.add(tcid)
            if parsed and plain and "parsed" in msg:
                self._fail("parsed_artifact", i, f"message {i} carries a structured-output 'parsed' field; "
                           "repair() strips it")
        self._audit.append({"event": "validation_ok", "message_count": len(messages)})
        return messages

    def _fail(self, violation: str, index: int, reason: str) -> None:
        self._audit.append({"event": "validation_error", "violation": violation, "message_index": index})
        raise MessageValidationError(reason, violation=violation, message_index=index)

    # -- repair ------------------------------------------------------------------------------------

    def repair(self, messages: list[Any]) -> list[Any]:
        """A repaired copy of ``messages``; raises for invalid roles and tool results without an id."""
        out: list[Any] = []
        repairs: list[dict[str, Any]] = []
        called: set[str] = set()
        answered: set[str] = set()
        for i, original in enumerate(messages):
            role = role_of(original)
            if self._strict_roles and role not in VALID_ROLES:
                self._fail("invalid_role", i, f"message {i} has role {role!r}; its intended role cannot be "
                           "inferred")
            msg = dict(original) if isinstance(original, dict) else original  # nested parts: copied on change
            calls = _get(msg, "tool_calls") or []
            if calls and isinstance(msg, dict):
                if _mixed_blocks(calls):
                    kept = [tc for tc in calls if not (tool_call_id_of(tc) or "").startswith("fc_")]
                    repairs.append({"repair": "duplicate_tool_call_blocks", "message_index": i,
                                    "dropped": len(calls) - len(kept)})
                    calls = msg["tool_calls"] = kept
                if _repeats(calls):
                    last: dict[str, Any] = {}
                    for tc in calls:
                        last[tool_call_id_of(tc) or f"#{id(tc)}"] = tc
                    calls = msg["tool_calls"] = list(last.values())
                    repairs.append({"repair": "duplicate_tool_call_ids", "message_index": i})
                if self._check_indices:
                    first = next((x for x in map(_index_of, calls) if x is not None), None)
                    if first not in (None, 0):
                        calls = msg["tool_calls"] = [dict(tc) if isinstance(tc, dict) else tc for tc in calls]
                        for tc in calls:
                            if _index_of(tc) is not None:
                                tc["index"] = _index_of(tc) - first  # type: ignore[operator]
                        repairs.append({"repair": "nonzero_tool_call_index", "message_index": i,
                                        "offset_removed": first})
            if role == "assistant":
                called.update(x for x in map(tool_call_id_of, calls) if x)
            if role == "tool":
                tcid = _get(msg, "tool_call_id")
                if not tcid:
                    self._fail("missing_tool_call_id", i, f"message {i} is a tool result without a "
                               "tool_call_id; which call it answers cannot be reconstructed")
                if tcid not in called or tcid in answered:
                    kind = "orphaned_tool_result" if tcid not in called else "duplicate_tool_result"
                    repairs.append({"repair": kind, "message_index": i, "dropped": 1})
                    continue
                answered.add(tcid)
            if self._check_parsed and isinstance(msg, dict) and "parsed" in msg:
                msg.pop("parsed", None)
                msg.pop("refusal", None)
                repairs.append({"repair": "parsed_artifact", "message_index": i})
            out.append(msg)
        for r in repairs:
            self._audit.append({"event": "repaired", **r})
        self._audit.append({"event": "repair_ok" if repairs else "validation_ok", "repairs": len(repairs),
                            "message_count": len(out)})
        return out
