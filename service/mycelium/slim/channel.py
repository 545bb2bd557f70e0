"""One room's SLIM channel, moderated by the process that holds the room's lock (sql/slim.sql).

It creates the group session, invites the members the database lists (``slim_roster``) and removes
those it no longer does, publishes the room's timeline by position and records how far it got, and
answers what members post: each post goes through the verb gateway as ``/reply`` does, with the
sender's identity as the actor, and the answer (``accepted`` or ``refused``) goes back to the sender
alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import jwt

from mycelium.conversations.wakes import wait_for
from mycelium.errors import Refusal
from mycelium.slim import wire
from mycelium.slim.runtime import bindings, group_config, seconds
from mycelium.verbs import HUB_PROCESS, Principal, Verbs, verbs_of
from mycelium.verbs.actor import HUB_PRINCIPAL
from mycelium.verbs.messages import message_read, reply

if TYPE_CHECKING:
    from mycelium.auth.tokens import TokenVerifier
    from mycelium.hub import Hub

log = logging.getLogger(__name__)

#: Messages published per round before their deliveries are awaited and the position recorded.
BATCH = 200
#: How long one invitation may take before it is given up (and tried again at the next look).
INVITE_SECONDS = 5.0
#: How long the wait for a delivery confirmation of a batch may take.
DELIVERY_SECONDS = 5.0
#: The longest wait before inviting again a member whose invitation failed.
RETRY_CAP_SECONDS = 60.0
#: How long closing a channel waits for the node to confirm (members that left never answer).
CLOSE_SECONDS = 0.5
#: The longest the publisher sleeps without looking at the timeline (a lost hint costs this much).
IDLE_SECONDS = 2.0

Mark = Callable[[int], Awaitable[int]]


class RoomChannel:
    """The channel of ``room`` while this process publishes it."""

    def __init__(self, hub: Hub, service: Any, conn_id: int, room: str, published: int, mark: Mark,
                 verifier: TokenVerifier | None = None) -> None:
        self.hub = hub
        self.room = room
        self.published = published
        """The last position recorded as published (its deliveries confirmed)."""
        self.sent = published
        """The last position handed to SLIM."""
        self._sent: asyncio.Queue[tuple[int, list[Any]]] = asyncio.Queue()
        self._service, self._conn_id, self._mark = service, conn_id, mark
        self._verifier = verifier
        self._verbs = verbs_of(hub, HUB_PRINCIPAL)
        self._app: Any = None
        self._session: Any = None
        self._invited: set[str] = set()
        self._failed: dict[str, tuple[int, float, Any]] = {}
        """Per handle not invited: failures in a row, when to try again, and the join it was for."""
        self._wake = asyncio.Event()
        self._roster_changed = asyncio.Event()
        self._first_roster = asyncio.Event()
        """Set once the members listed when the channel opened have been invited (or tried): nothing
        is published before, or a new moderator would publish its first batch to an empty channel."""
        self._tasks: list[asyncio.Task[None]] = []
        self.delivery_failures = 0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def open(self) -> None:
        slim = bindings()
        settings = self.hub.settings
        name = slim.Name.from_string(wire.moderator_name(self.room))
        secret = wire.room_secret(settings.slim_secret, self.room)
        self._app = self._service.create_app_with_secret(name, secret)
        await self._app.subscribe_async(name, self._conn_id)
        made = await self._app.create_session_async(group_config(), slim.Name.from_string(
            wire.channel_name(self.room)))
        await made.completion.wait_async()
        self._session = made.session
        self._roster_changed.set()

    def start(self, waiters: Any) -> None:
        """Run the channel's three tasks (publishing, members, posts) until :meth:`close`."""
        self._room_event = waiters.for_room(self.room)
        self._waiters = waiters
        self._tasks = [asyncio.create_task(job(), name=f"slim {self.room} {job.__name__}")
                       for job in (self._publishing, self._membership, self._posts)]

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return self._tasks

    def roster_changed(self) -> None:
        self._roster_changed.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        if getattr(self, "_waiters", None) is not None:
            self._waiters.drop_room(self.room, self._room_event)
        if self._session is not None and self._app is not None:
            with contextlib.suppress(Exception):
                done = await self._app.delete_session_async(self._session)
                await asyncio.wait_for(done.wait_async(), CLOSE_SECONDS)
        self._session = None

    # -- members -----------------------------------------------------------------------------------

    async def _membership(self) -> None:
        while True:
            await self._roster_changed.wait()
            self._roster_changed.clear()
            try:
                await self.sync_members()
            finally:
                self._first_roster.set()

    async def sync_members(self) -> None:
        """Invite whoever the database lists and the channel lacks; remove whoever it lists no more.
        An invitation that fails (the member is not listening: gone without leaving, or holding
        another secret) is tried again after 1, 2, 4 … :data:`RETRY_CAP_SECONDS` seconds, or at once
        when the member asks to join again."""
        slim = bindings()
        rows = await self._verbs.call(HUB_PROCESS, "slim_roster", room=self.room)
        wanted = {r["handle"]: r["joined_at"] for r in rows}
        for handle in sorted(self._invited - wanted.keys()):
            member = slim.Name.from_string(wire.member_name(self.room, handle))
            with contextlib.suppress(Exception):
                done = await self._session.remove_async(member)
                await asyncio.wait_for(done.wait_async(), INVITE_SECONDS)
            self._invited.discard(handle)
        now = time.monotonic()
        later: list[float] = []
        for handle in sorted(wanted.keys() - self._invited):
            failures, not_before, asked = self._failed.get(handle, (0, 0.0, None))
            if asked == wanted[handle] and now < not_before:
                later.append(not_before)
                continue
            member = slim.Name.from_string(wire.member_name(self.room, handle))
            try:
                await self._app.set_route_async(member, self._conn_id)
                done = await self._session.invite_async(member)
                await asyncio.wait_for(done.wait_async(), INVITE_SECONDS)
            except Exception as exc:  # not listening yet, gone, or holding another secret
                failures = failures + 1 if asked == wanted[handle] else 1
                wait = min(RETRY_CAP_SECONDS, 2.0 ** (failures - 1))
                self._failed[handle] = (failures, time.monotonic() + wait, wanted[handle])
                later.append(time.monotonic() + wait)
                log.info("slim %s: @%s not invited (%s); next try in %g s", self.room, handle, exc, wait)
                continue
            self._failed.pop(handle, None)
            self._invited.add(handle)
            head = await self._verbs.call(HUB_PROCESS, "timeline_head", room=self.room)
            await self._publish(wire.encode("welcome", room=self.room, handle=handle, head=head), "welcome")
        if later:
            delay = max(0.0, min(later) - time.monotonic())
            asyncio.get_running_loop().call_later(delay, self._roster_changed.set)

    # -- publishing --------------------------------------------------------------------------------

    async def _publish(self, data: bytes, frame: wire.Frame) -> Any:
        return await self._session.publish_async(data, wire.payload_type(frame), None)

    async def _publishing(self) -> None:
        confirming = asyncio.create_task(self._confirming(), name=f"slim {self.room} confirming")
        try:
            await self._first_roster.wait()
            while True:
                self._room_event.clear()
                published = await self.publish_pending()
                if published == BATCH:
                    continue
                await wait_for(self._room_event, IDLE_SECONDS)
        finally:
            confirming.cancel()
            with contextlib.suppress(BaseException):
                await confirming

    async def publish_pending(self) -> int:
        """Publish what the timeline gained after the last position published (one batch); its
        deliveries are confirmed, and the position recorded, by :meth:`_confirming`, so the next
        batch does not wait for them. How many were published."""
        rows = await self._verbs.call(HUB_PROCESS, "messages_after", room=self.room, after=self.sent,
                                      limit=BATCH)
        if not rows:
            return 0
        handles = []
        for row in rows:
            body = message_read(row).model_dump(mode="json")
            data = wire.encode("message", room=self.room, position=row["position"], message=body)
            handles.append(await self._publish(data, "message"))
        self.sent = rows[-1]["position"]
        self._sent.put_nowait((self.sent, handles))
        return len(rows)

    async def _confirming(self) -> None:
        """Record each batch's last position once the node has confirmed its deliveries, in order:
        a crash before that leaves the batch to be published again (same ids), never skipped."""
        while True:
            position, handles = await self._sent.get()
            if self._invited:
                waits = (asyncio.wait_for(h.wait_async(), DELIVERY_SECONDS) for h in handles)
                results = await asyncio.gather(*waits, return_exceptions=True)
                failed = sum(isinstance(r, BaseException) for r in results)
                if failed:
                    # a member that vanished without leaving: the message still went to the others
                    self.delivery_failures += failed
                    self._roster_changed.set()
            self.published = await self._mark(position)

    # -- posts -------------------------------------------------------------------------------------

    async def _posts(self) -> None:
        slim = bindings()
        while True:
            try:
                received = await self._session.get_message_async(seconds(1.0))
            except slim.SlimError as exc:
                if "timeout" in str(exc).lower():
                    continue
                raise
            await self.answer(received)

    async def answer(self, received: Any) -> None:
        """Record one post received on the channel, or refuse it; tell its sender alone."""
        context = received.context
        request: Any = None
        try:
            frame = wire.decode(bytes(received.payload))
            request = frame.get("request")
            if frame["frame"] != "post":
                raise Refusal(422, "invalid_frame", f"a member sends post frames, not {frame['frame']}")
            text, episode = frame["text"], frame.get("episode")
            if not isinstance(text, str) or not text.strip():
                raise Refusal(422, "invalid_frame", "a post's text is a non-blank string")
            if episode is not None and not isinstance(episode, str):
                raise Refusal(422, "invalid_frame", "a post's episode is a string or null")
            verbs, handle = await self._author(context, frame)
            row = await reply(verbs, self.room, handle, text, episode)
            answer = wire.encode("accepted", request=request, message_id=row["message_id"],
                                 position=row["position"])
            frame_kind: wire.Frame = "accepted"
        except wire.FrameError as exc:
            answer, frame_kind = self._refused(request, Refusal(422, "invalid_frame", str(exc))), "refused"
        except Refusal as exc:
            answer, frame_kind = self._refused(request, exc), "refused"
        done = await self._session.publish_to_async(context, answer, wire.payload_type(frame_kind), None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(done.wait_async(), DELIVERY_SECONDS)

    @staticmethod
    def _refused(request: Any, exc: Refusal) -> bytes:
        return wire.encode("refused", request=request, status=exc.status, error=exc.error,
                           message=exc.message)

    async def _author(self, context: Any, frame: dict[str, Any]) -> tuple[Verbs, str]:
        """Who wrote a post, and the gateway to record it with. ``psk``: the handle of the sender's
        channel name (the node routes by it; only holders of the room's secret are on the channel).
        ``jwt``: the ``sub`` of the member token the post carries, which must be for this room."""
        named = wire.handle_of(str(context.source_name), self.room)
        if named is None:
            raise Refusal(403, "not_a_member", f"{context.source_name} is no member's name on this channel")
        settings = self.hub.settings
        if settings.slim_identity == "psk":
            principal = Principal(named, "agent", named, "slim-psk") if settings.auth else None
            return verbs_of(self.hub, principal), named
        token = frame.get("token")
        if not isinstance(token, str) or self._verifier is None:
            raise Refusal(401, "unauthenticated", "a post on this channel carries a member token (token)")
        from mycelium.auth.tokens import TokenRefused

        try:
            principal = await self._verifier.verify(token)
        except TokenRefused as exc:
            raise Refusal(401, "unauthenticated", f"the post's token is refused: {exc}") from None
        room = jwt.decode(token, options={"verify_signature": False}).get("mycelium_room")
        if principal.role != "operator" and room != self.room:
            raise Refusal(403, "token_for_another_room",
                          f"the post's token is for room {room!r}, not {self.room!r}")
        if principal.role != "operator" and principal.handle != named:
            raise Refusal(403, "actor_mismatch",
                          f"the post's token is @{principal.handle}'s, but it came from @{named}")
        return verbs_of(self.hub, principal), principal.handle

