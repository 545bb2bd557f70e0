"""``HistoryGuard``: refuse a history that is too long, repeats turns, or lost messages silently.

``validate(messages)`` (before each model call) raises :class:`HistoryTruncatedError` when the
token count (see :mod:`mycelium.guards.tokens`) exceeds ``max_tokens``, the message count exceeds
``max_messages``, or (``detect_duplicates``) an identical message — same role, content, tool calls
and tool-call id — appears twice; it remembers the messages it passed. ``check_for_drops(messages)``
(after a framework trimmed or summarised them) raises when any of those is no longer there, counted
with multiplicity, so losing one of two equal messages is seen too. ``check_summary_fidelity``
raises when a ``track_keywords`` word present at ``validate`` is gone.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from mycelium.guards.messages import role_of
from mycelium.guards.session import record_event
from mycelium.guards.tokens import PER_MESSAGE, PRIMING, counter_for, estimate


class HistoryTruncatedError(Exception):
    """The history is over a limit or lost messages: ``.reason`` (token_limit, message_count,
    duplicate_turns, dropped_messages, summary_keywords), ``.message_count``, ``.estimated_tokens``."""

    def __init__(self, reason: str, message_count: int, estimated_tokens: int, *, kind: str = "") -> None:
        super().__init__(reason)
        self.reason = kind
        self.message_count = message_count
        self.estimated_tokens = estimated_tokens


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                parts.append(str(block.get("text") or block.get("content") or ""))
            else:
                parts.append(str(block))
        return " ".join(parts)
    return "" if content is None else str(content)


def _content(msg: Any) -> Any:
    return msg.get("content", "") if isinstance(msg, dict) else getattr(msg, "content", msg)


def _fingerprint(msg: Any) -> tuple[str, str, str, Any]:
    """What makes two messages the same turn: role, text, tool calls and tool-call id."""
    if isinstance(msg, dict):
        calls, call_id = msg.get("tool_calls"), msg.get("tool_call_id")
    else:
        calls, call_id = getattr(msg, "tool_calls", None), getattr(msg, "tool_call_id", None)
    return role_of(msg), text_of(_content(msg)), repr(calls) if calls else "", call_id


def estimate_tokens(messages: list[Any]) -> int:
    """The estimate alone (no tokenizer): see :mod:`mycelium.guards.tokens`."""
    return PRIMING + sum(PER_MESSAGE + estimate(text_of(_content(m))) for m in messages)


class HistoryGuard:
    """Limits for the history sent to a model.

    ``max_tokens`` / ``max_messages``: None means no limit. ``warn_at``: fraction of ``max_tokens``
    that records a ``history_near_limit`` event. ``tokenizer``: ``"auto"`` (default), ``"estimate"``,
    an encoder or a counting function.
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        max_messages: int | None = None,
        warn_at: float = 0.9,
        detect_duplicates: bool = True,
        track_keywords: list[str] | None = None,
        tokenizer: Any = "auto",
    ) -> None:
        for name, value in (("max_tokens", max_tokens), ("max_messages", max_messages)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        self._max_tokens = max_tokens
        self._max_messages = max_messages
        self._warn_at = warn_at
        self._detect_duplicates = detect_duplicates
        self._track_keywords = [kw.lower() for kw in (track_keywords or [])]
        self._tokenizer = tokenizer
        self._count: Any = None
        self.tokenizer_name = ""
        self._counted: dict[str, int] = {}
        self._last: Counter[tuple[str, str, str, Any]] | None = None
        self._last_keywords: set[str] = set()
        self._audit: deque[dict[str, Any]] = deque(maxlen=1000)

    # -- counting ----------------------------------------------------------------------------------

    def _text_tokens(self, text: str) -> int:
        n = self._counted.get(text)
        if n is None:
            if self._count is None:
                self._count, self.tokenizer_name = counter_for(self._tokenizer)
            n = self._count(text)
            if len(self._counted) > 10_000:
                self._counted.clear()
            self._counted[text] = n
        return n

    def estimate_tokens(self, messages: list[Any]) -> int:
        """The transcript's token count (see the module docstring for how it is counted)."""
        return PRIMING + sum(PER_MESSAGE + self._text_tokens(text_of(_content(m))) for m in messages)

    # -- checks ------------------------------------------------------------------------------------

    def _event(self, entry: dict[str, Any]) -> None:
        self._audit.append(entry)
        record_event(entry)

    def _raise(self, kind: str, reason: str, count: int, tokens: int) -> None:
        self._event({"event": "history_truncated", "reason": kind, "message_count": count,
                     "estimated_tokens": tokens})
        raise HistoryTruncatedError(reason, count, tokens, kind=kind)

    def validate(self, messages: list[Any]) -> list[Any]:
        """Raise :class:`HistoryTruncatedError` over a limit; else remember the messages and return them."""
        count = len(messages)
        tokens = self.estimate_tokens(messages)
        if self._max_tokens is not None:
            if tokens > self._max_tokens:
                self._raise("token_limit", f"message history would exceed the token limit: {tokens} tokens "
                            f"> {self._max_tokens} ({self.tokenizer_name}); summarise or drop earlier turns "
                            "before sending", count, tokens)
            if tokens >= self._max_tokens * self._warn_at:
                self._event({"event": "history_near_limit", "estimated_tokens": tokens,
                             "max_tokens": self._max_tokens, "pct": round(tokens / self._max_tokens, 2)})
        if self._max_messages is not None and count > self._max_messages:
            self._raise("message_count", f"message history exceeds max_messages: {count} messages > "
                        f"{self._max_messages}", count, tokens)
        prints = [_fingerprint(m) for m in messages]
        if self._detect_duplicates:
            seen: set[tuple[str, str, str, Any]] = set()
            repeated = []
            for i, fp in enumerate(prints):
                if fp in seen:
                    repeated.append(i)
                seen.add(fp)
            if repeated:
                self._raise("duplicate_turns", f"Duplicate turns detected at index(es) {repeated}: the same "
                            f"message appears again ({len(repeated)} repeat(s))", count, tokens)
        self._last = Counter(prints)
        if self._track_keywords:
            combined = " ".join(text_of(_content(m)) for m in messages).lower()
            self._last_keywords = {kw for kw in self._track_keywords if kw in combined}
        self._event({"event": "history_ok", "message_count": count, "estimated_tokens": tokens})
        return messages

    def check_for_drops(self, messages: list[Any]) -> None:
        """Raise :class:`HistoryTruncatedError` when a message passed by the last ``validate`` is gone."""
        if self._last is None:
            raise RuntimeError("check_for_drops() called before validate(); call validate(messages) first")
        missing = self._last - Counter(_fingerprint(m) for m in messages)
        dropped = sum(missing.values())
        if dropped:
            before = sum(self._last.values())
            self._raise("dropped_messages", f"{dropped} message(s) were silently dropped from the history "
                        f"(had {before}, now {len(messages)})", len(messages), self.estimate_tokens(messages))
        self._event({"event": "history_drop_check_ok", "message_count": len(messages)})

    def check_summary_fidelity(self, messages: list[Any]) -> None:
        """Raise when a tracked keyword present at the last ``validate`` is missing now."""
        if not self._last_keywords:
            return
        combined = " ".join(text_of(_content(m)) for m in messages).lower()
        lost = sorted(kw for kw in self._last_keywords if kw not in combined)
        if lost:
            self._raise("summary_keywords", f"summary or compaction dropped {len(lost)} tracked keyword(s): "
                        f"{', '.join(lost)}", len(messages), self.estimate_tokens(messages))

    def audit_log(self) -> list[dict[str, Any]]:
        return list(self._audit)
