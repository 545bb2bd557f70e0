"""The one model seam every engine that needs a model goes through.

``await model.complete(system, messages)`` returns the model's text or raises :class:`ModelError`
saying what went wrong (missing, slow, failing). The engine reports that error where it was asked
and in its record; it never invents an answer in the model's place.

* :class:`ScriptedModel` — deterministic rules read from a file (YAML or JSON), for tests and demos;
* :class:`ChatEndpoint` — any OpenAI-compatible ``/chat/completions`` endpoint (llama.cpp, vLLM,
  Ollama, hosted ones): ``MYCELIUM_LLM_URL``, ``MYCELIUM_LLM_MODEL``, ``MYCELIUM_LLM_API_KEY``;
* :class:`PiCli` — the ``pi`` command (``MYCELIUM_PI_MODEL`` = ``provider/model``; ``MYCELIUM_PI_BIN``).

:func:`model_from_env` picks one: a script (``MYCELIUM_MODEL_SCRIPT``), else the endpoint, else pi,
else :class:`NoModel`, which fails every call with the sentence that says how to configure one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

DEFAULT_TIMEOUT = 60.0
log = logging.getLogger(__name__)


class ModelError(RuntimeError):
    """A model that did not answer; the message says why (shown in the thread and the record)."""


class Model(Protocol):
    name: str

    async def complete(
        self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = ""
    ) -> str: ...


@dataclass(frozen=True)
class Rule:
    when: re.Pattern[str]
    reply: str | None = None
    fail: str | None = None
    delay: float = 0.0
    handle: str | None = None


class ScriptedModel:
    """Answers by the first rule whose ``when`` (a regular expression, case-insensitive) is found in
    the last message (and whose ``handle``, if given, is the member played); ``fail`` raises that
    error, ``delay`` waits first. No rule matching is an error, never an invented answer."""

    def __init__(self, rules: Sequence[Rule], name: str = "scripted") -> None:
        self.rules = tuple(rules)
        self.name = name

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        data = yaml.safe_load(Path(path).read_text())
        raw = data.get("rules") if isinstance(data, Mapping) else data
        if not isinstance(raw, list):
            raise ModelError(f"{path}: a script is a list of rules (or {{rules: […]}})")
        rules = []
        for i, r in enumerate(raw):
            if not isinstance(r, Mapping) or ("reply" not in r and "fail" not in r):
                raise ModelError(f"{path}: rule {i + 1} needs when and reply (or fail)")
            rules.append(
                Rule(
                    re.compile(str(r.get("when", "")), re.IGNORECASE | re.DOTALL),
                    reply=r.get("reply"),
                    fail=r.get("fail"),
                    delay=float(r.get("delay", 0)),
                    handle=r.get("handle"),
                )
            )
        return cls(rules, name=f"scripted:{Path(path).name}")

    async def complete(self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = "") -> str:
        last = messages[-1]["content"] if messages else ""
        for rule in self.rules:
            if rule.handle and rule.handle != handle:
                continue
            if rule.when.search(last):
                if rule.delay:
                    await asyncio.sleep(rule.delay)
                if rule.fail is not None:
                    raise ModelError(rule.fail)
                return str(rule.reply)
        raise ModelError(f"{self.name} has no rule for this message")


@dataclass(frozen=True)
class Completion:
    text: str
    tokens_in: int | None = None
    tokens_out: int | None = None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class ChatEndpoint:
    """An OpenAI-compatible chat endpoint."""

    def __init__(
        self, url: str, model: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.name = f"chat:{model}"

    async def complete(self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = "") -> str:
        return (await self.complete_counted(system, messages, handle=handle)).text

    async def complete_counted(self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = ""
                               ) -> Completion:
        """The answer with the tokens the endpoint says it read and wrote (``usage``; None if not)."""
        import httpx

        url = self.url if self.url.endswith("/chat/completions") else self.url + "/chat/completions"
        body = {"model": self.model, "messages": [{"role": "system", "content": system}, *messages]}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.post(url, json=body, headers=headers)
        except httpx.TimeoutException:
            raise ModelError(f"{self.name} did not answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise ModelError(f"{self.name} could not be reached: {exc}") from None
        if response.status_code != 200:
            raise ModelError(f"{self.name} answered HTTP {response.status_code}: {response.text[:300]}")
        try:
            answer = response.json()
            text = answer["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ModelError(f"{self.name} answered something that is not a chat completion") from None
        if not isinstance(text, str) or not text.strip():
            raise ModelError(f"{self.name} answered with no text")
        usage = answer.get("usage") if isinstance(answer.get("usage"), Mapping) else {}
        return Completion(text, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")))


class PiCli:
    """The ``pi`` command, one non-interactive call per turn (``pi --model <provider/model> -p <prompt>``)."""

    def __init__(self, model: str, binary: str = "pi", timeout: float = DEFAULT_TIMEOUT) -> None:
        self.model = model
        self.binary = binary
        self.timeout = timeout
        self.name = f"pi:{model}"

    async def complete(self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = "") -> str:
        if shutil.which(self.binary) is None:
            raise ModelError(f"the pi command ({self.binary}) is not installed")
        transcript = "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)
        args = [self.binary, "--model", self.model, "--system-prompt", system, "-p", transcript]
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise ModelError(f"{self.name} did not answer within {self.timeout:g} s") from None
        if proc.returncode != 0:
            raise ModelError(f"{self.name} exited {proc.returncode}: {err.decode(errors='replace')[:300]}")
        text = out.decode(errors="replace").strip()
        if not text:
            raise ModelError(f"{self.name} answered with no text")
        return text


class NoModel:
    name = "none"

    async def complete(self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = "") -> str:
        raise ModelError(
            "no model is configured (set MYCELIUM_LLM_URL, MYCELIUM_PI_MODEL or MYCELIUM_MODEL_SCRIPT)"
        )


#: Records one call: ``{"engine", "model", "outcome", "duration_ms", "tokens_in", "tokens_out"}``.
Record = Callable[[dict[str, Any]], Awaitable[None]]


class Metered:
    """``inner`` with each call recorded by ``record`` (a usage event): which engine asked, the
    model, answered or failed, how long it took, and the tokens when the model says. A record that
    fails is logged; the call's answer (or its error) is the model's, as it was."""

    def __init__(self, inner: Model, record: Record) -> None:
        self.inner, self.record = inner, record
        self.name = inner.name

    async def complete(self, system: str, messages: Sequence[Mapping[str, str]], *, handle: str = "") -> str:
        started = time.monotonic()
        counted = getattr(self.inner, "complete_counted", None)
        done: Completion | None = None
        try:
            if counted is not None:
                done = await counted(system, messages, handle=handle)
            else:
                done = Completion(await self.inner.complete(system, messages, handle=handle))
            return done.text
        except ModelError:
            await self._record(handle, "failed", started, None)
            raise
        finally:
            if done is not None:
                await self._record(handle, "answered", started, done)

    async def _record(self, handle: str, outcome: str, started: float, done: Completion | None) -> None:
        try:
            await self.record({"engine": handle or None, "model": self.name, "outcome": outcome,
                               "duration_ms": (time.monotonic() - started) * 1000,
                               "tokens_in": done.tokens_in if done else None,
                               "tokens_out": done.tokens_out if done else None})
        except Exception as exc:  # the usage record is never worth an engine's answer
            log.warning("usage: a model call was not recorded: %s", exc)


def configured(model: Any) -> bool:
    """Whether ``model`` (metered or not) is one the environment configured, not :class:`NoModel`."""
    return not isinstance(getattr(model, "inner", model), NoModel)


def model_from_env(env: Mapping[str, str] | None = None) -> Any:
    """The model the environment configures (see the module docstring)."""
    env = os.environ if env is None else env
    timeout = float(env.get("MYCELIUM_LLM_TIMEOUT") or DEFAULT_TIMEOUT)
    if env.get("MYCELIUM_MODEL_SCRIPT"):
        return ScriptedModel.from_file(env["MYCELIUM_MODEL_SCRIPT"])
    if env.get("MYCELIUM_LLM_URL"):
        return ChatEndpoint(
            env["MYCELIUM_LLM_URL"],
            env.get("MYCELIUM_LLM_MODEL") or "default",
            env.get("MYCELIUM_LLM_API_KEY") or None,
            timeout,
        )
    if env.get("MYCELIUM_PI_MODEL"):
        return PiCli(env["MYCELIUM_PI_MODEL"], env.get("MYCELIUM_PI_BIN") or "pi", timeout)
    return NoModel()
