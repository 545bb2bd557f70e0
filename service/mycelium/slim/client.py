"""The SDK's side of a room's SLIM channel: ``mycelium.slim.join(room, handle)``.

    async with mycelium.slim.join("atlas", "julia") as member:
        await member.post("hello")              # recorded by the hub as /reply records it
        async for message in member:            # the room's timeline, in order, each once
            print(message["sender_handle"], message["content"])

The member listens on the node under its name (``mycelium/<room>/<handle>``), asks the hub over HTTP
to be on the channel, and is invited by the room's moderator. When the moderator changes (the
publishing replica died and another took the room over) the new one invites it again: the member
follows, and drops the messages the new moderator publishes again (same id).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import httpx

from mycelium import environment
from mycelium.slim import wire
from mycelium.slim.runtime import bindings, connect, seconds

#: How many message ids a member remembers to drop repeats by.
SEEN_IDS = 10_000


class MemberRefused(Exception):
    """The hub refused what the member asked (to join, or a post): its status, code and sentence."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(f"{status} {error}: {message}")
        self.status, self.error, self.message = status, error, message


class Member:
    """``handle`` on ``room``'s channel, from ``async with`` until it ends (or :meth:`close`).

    ``api_url`` is the hub (``MYCELIUM_API_URL``), ``endpoint`` the SLIM node (the one the hub names
    when not given), ``secret`` the hub's SLIM master secret (``MYCELIUM_SLIM_SECRET``, else the
    development one), ``token`` a member token: sent to the hub over HTTP, and with every post when
    the channel's identity tier is ``jwt``."""

    def __init__(self, room: str, handle: str, *, api_url: str | None = None, endpoint: str | None = None,
                 secret: str | None = None, token: str | None = None, join_seconds: float = 15.0) -> None:
        self.room, self.handle = room, handle.strip().lstrip("@").lower()
        self.api_url = (api_url or environment.value("api_url") or environment.DEFAULT_API_URL).rstrip("/")
        self.endpoint = endpoint or environment.value("slim_endpoint")
        self.secret = secret or environment.value("slim_secret") or wire.dev_secret()
        self.token = token
        self.join_seconds = join_seconds
        self.identity = "psk"
        self.sessions = 0
        """How many channel sessions this member has been invited to (more than one: a takeover)."""
        self.repeats = 0
        """How many messages arrived again and were dropped."""
        self._messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._moderator: Any = None  # the context of the moderator's last frame: where posts go
        self._session: Any = None
        self._invited = asyncio.Event()
        self.removed = asyncio.Event()
        """Set while the moderator has taken this member off the channel (a new invitation clears it)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._app: Any = None
        self._http: httpx.AsyncClient | None = None

    # -- joining -----------------------------------------------------------------------------------

    async def __aenter__(self) -> Member:
        await self.open()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert self._http is not None
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = await self._http.request(method, f"{self.api_url}{path}", headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise MemberRefused(503, "hub_unreachable", f"no hub answers at {self.api_url} ({exc})") from None
        body = response.json() if response.content else {}
        if response.status_code >= 400:
            raise MemberRefused(response.status_code, str(body.get("error", "refused")),
                                str(body.get("message", body.get("detail", response.text))))
        return body

    async def open(self) -> None:
        slim = bindings()
        self._http = httpx.AsyncClient(timeout=30.0, trust_env=False)
        channel = await self._call("GET", f"/api/rooms/{self.room}/slim")
        if not channel.get("enabled"):
            raise MemberRefused(409, "slim_off", f"the hub at {self.api_url} runs no SLIM channels")
        self.endpoint = self.endpoint or channel["endpoint"]
        self.identity = channel["identity"]
        service, conn_id = await connect(self.endpoint, "mycelium-member")
        name = slim.Name.from_string(wire.member_name(self.room, self.handle))
        self._app = service.create_app_with_secret(name, wire.room_secret(self.secret, self.room))
        await self._app.subscribe_async(name, conn_id)
        self._spawn(self._sessions())
        await self._call("POST", f"/api/rooms/{self.room}/slim/members", json={"handle": self.handle})
        try:
            await asyncio.wait_for(self._invited.wait(), self.join_seconds)
        except TimeoutError:
            await self.close()
            raise MemberRefused(504, "not_invited",
                                f"the moderator of {self.room!r} did not invite @{self.handle} within "
                                f"{self.join_seconds:g} s (is a hub publishing it, with this master "
                                "secret?)") from None

    async def close(self, leave: bool = False) -> None:
        """Stop listening; with ``leave``, also tell the hub to take the member off the channel."""
        if leave and self._http is not None:
            with contextlib.suppress(MemberRefused):
                await self._call("DELETE", f"/api/rooms/{self.room}/slim/members/{self.handle}")
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _spawn(self, job: Any) -> None:
        task = asyncio.create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sessions(self) -> None:
        """Follow every invitation: the first, and one after each takeover."""
        slim = bindings()
        while True:
            try:
                session = await self._app.listen_for_session_async(seconds(1.0))
            except slim.SlimError:
                continue  # no invitation this second
            self.sessions += 1
            self._session = session
            self.removed.clear()
            self._spawn(self._read(session))

    async def _read(self, session: Any) -> None:
        slim = bindings()
        while True:
            try:
                received = await session.get_message_async(seconds(1.0))
            except slim.SlimError as exc:
                if "timeout" in str(exc).lower() and session is self._session:
                    continue
                if session is self._session:  # closed by the moderator: taken off the channel
                    self._session = self._moderator = None
                    self.removed.set()
                return  # closed, or replaced by a newer session
            try:
                frame = wire.decode(bytes(received.payload))
            except wire.FrameError:
                continue
            if wire.handle_of(str(received.context.source_name), self.room) is not None:
                continue  # another member's frame: only the moderator's count
            self._moderator = received.context
            self._session = session
            self._on_frame(frame)

    def _on_frame(self, frame: dict[str, Any]) -> None:
        kind = frame["frame"]
        if kind == "welcome":
            if frame["handle"] == self.handle:
                self._invited.set()
        elif kind == "message":
            self._invited.set()
            message = frame["message"]
            key = str(message.get("id"))
            if key in self._seen:
                self.repeats += 1
                return
            self._seen[key] = None
            if len(self._seen) > SEEN_IDS:
                self._seen.popitem(last=False)
            self._messages.put_nowait(message)
        elif kind in ("accepted", "refused"):
            waiting = self._answers.pop(str(frame.get("request")), None)
            if waiting is not None and not waiting.done():
                waiting.set_result(frame)

    # -- listening and speaking --------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self._messages.get()

    async def next(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message of the timeline (TimeoutError after ``timeout`` seconds)."""
        return await asyncio.wait_for(self._messages.get(), timeout)

    async def post(self, text: str, episode: str | None = None, timeout: float = 15.0) -> dict[str, Any]:
        """Say ``text`` on the channel (in ``episode``, else the room); the hub's answer: the message
        id and position it was recorded at, or :class:`MemberRefused` with the hub's refusal."""
        if self._session is None or self._moderator is None:
            raise MemberRefused(409, "not_invited", f"@{self.handle} is not on {self.room!r}'s channel yet")
        request = uuid.uuid4().hex[:16]
        fields: dict[str, Any] = {"request": request, "text": text, "episode": episode}
        if self.identity == "jwt":
            fields["token"] = self.token
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[request] = answer
        try:
            done = await self._session.publish_to_async(self._moderator, wire.encode("post", **fields),
                                                        wire.payload_type("post"), None)
            await done.wait_async()
            frame = await asyncio.wait_for(answer, timeout)
        finally:
            self._answers.pop(request, None)
        if frame["frame"] == "refused":
            raise MemberRefused(int(frame["status"]), str(frame["error"]), str(frame["message"]))
        return frame
