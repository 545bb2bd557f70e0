"""Verifying a bearer JWT against the configured issuers (PyJWT), into a :class:`Principal`.

The issuer is chosen by the token's exact ``iss``; its algorithm must be in that issuer's
allow-list (``none`` never is, and an issuer with public keys allows no HMAC algorithm); the key is
the issuer's secret, or the JWK its ``kid`` names (a JWKS is fetched, cached for ``JWKS_TTL``
seconds, and fetched again for an unknown ``kid`` at most every ``JWKS_MIN_REFRESH`` seconds). Then
the signature, ``exp`` (required), ``nbf``, ``iss`` and ``aud`` are checked with a small leeway.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import httpx
import jwt

from mycelium.auth.issuers import Issuer
from mycelium.verbs.actor import ROLES, Principal

if TYPE_CHECKING:
    from mycelium.auth.member_tokens import MemberTokens

JWKS_TTL = 300.0
JWKS_MIN_REFRESH = 10.0
JWKS_MAX_BYTES = 256 * 1024
#: a verified token is remembered this long (and never past its exp, nor once its issuer's keys
#: changed), so an agent's every request does not decode and check its signature again
VERIFIED_SECONDS = 60.0
VERIFIED_TOKENS = 4096


class TokenRefused(Exception):
    """A token that does not admit its bearer; ``reason`` says why (shown to the client)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeySet:
    """An issuer's public keys by ``kid``: static ones, or a JWKS URL's (fetched and cached)."""

    def __init__(self, issuer: Issuer) -> None:
        self._url = issuer.jwks_url
        self._keys: dict[str | None, jwt.PyJWK] = _by_kid(list(issuer.keys)) if issuer.keys else {}
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    def held(self) -> object:
        """The keys held now (a refresh replaces them: a token verified with older ones is checked
        again)."""
        return self._keys

    async def key(self, kid: str | None) -> jwt.PyJWK:
        if self._url is not None:
            age = time.monotonic() - self._fetched_at
            if age > JWKS_TTL or (kid not in self._keys and age > JWKS_MIN_REFRESH):
                await self._refresh(force=age > JWKS_TTL)
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        found = self._keys.get(kid)
        if found is None:
            raise TokenRefused("the token names no key id" if kid is None else f"unknown key id {kid!r}")
        return found

    async def _refresh(self, force: bool) -> None:
        async with self._lock:
            if not force and time.monotonic() - self._fetched_at <= JWKS_MIN_REFRESH:
                return  # another request refreshed it meanwhile
            assert self._url is not None
            try:
                async with httpx.AsyncClient(timeout=5.0) as client:
                    response = await client.get(self._url)
                response.raise_for_status()
                if len(response.content) > JWKS_MAX_BYTES:
                    raise ValueError("the key set is too large")
                keys = _by_kid(response.json().get("keys", []))
            except (httpx.HTTPError, ValueError, TypeError, AttributeError, jwt.PyJWKError) as exc:
                self._fetched_at = time.monotonic()  # do not hammer a failing issuer
                if not self._keys:
                    raise TokenRefused(f"the issuer's keys could not be fetched: {exc}") from None
                return  # keep the keys fetched before
            self._keys, self._fetched_at = keys, time.monotonic()


def _by_kid(jwks: list[Any]) -> dict[str | None, jwt.PyJWK]:
    keys: dict[str | None, jwt.PyJWK] = {}
    for jwk in jwks:
        try:
            keys[jwk.get("kid")] = jwt.PyJWK.from_dict(jwk)
        except (jwt.PyJWKError, jwt.InvalidKeyError, AttributeError):
            continue  # a key of a type this hub cannot use: never chosen
    return keys


class TokenVerifier:
    def __init__(self, issuers: tuple[Issuer, ...], leeway: float = 30.0) -> None:
        self.issuers = {i.issuer: i for i in issuers}
        self.leeway = leeway
        self._keys = {i.issuer: KeySet(i) for i in issuers if not i.hmac}
        self.members: MemberTokens | None = None
        """The hub's own member tokens, trusted beside the configured issuers (set once started)."""
        self._verified: dict[str, tuple[Principal, float, Issuer, object]] = {}

    def _held(self, issuer: Issuer) -> object:
        """What a token of ``issuer`` was checked against: its secret, or the keys held now."""
        members = self.members
        if issuer.hmac:
            return issuer
        if members is not None and issuer is members.issuer:
            return members.held()
        return self._keys[issuer.issuer].held()

    async def verify(self, token: str) -> Principal:
        known = self._verified.get(token)
        if known is not None:
            principal, until, issuer, held = known
            if (time.monotonic() < until and self._held(issuer) is held
                    and (principal.expires_at is None or time.time() <= principal.expires_at + self.leeway)):
                return principal
            del self._verified[token]
        principal, issuer, held = await self._check(token)
        if len(self._verified) >= VERIFIED_TOKENS:
            del self._verified[next(iter(self._verified))]
        self._verified[token] = (principal, time.monotonic() + VERIFIED_SECONDS, issuer, held)
        return principal

    async def _check(self, token: str) -> tuple[Principal, Issuer, object]:
        """The principal a token names once its signature and claims are checked, its issuer, and
        the keys it was checked against (taken with the key, with no await between them)."""
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"malformed token: {exc}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            raise TokenRefused("unsigned tokens (alg none) are never accepted")
        iss = unverified.get("iss")
        issuer = self.issuers.get(iss) if isinstance(iss, str) else None
        members = self.members
        if issuer is None and members is not None and iss == members.issuer.issuer:
            issuer = members.issuer
        if issuer is None:
            raise TokenRefused("the token has no iss" if iss is None else f"unknown issuer {iss!r}")
        if alg not in issuer.algorithms:
            raise TokenRefused(f"algorithm {alg} is not allowed for issuer {iss!r}")
        key: Any
        if issuer.hmac:
            key = issuer.secret
        elif members is not None and issuer is members.issuer:
            key = await members.public_key(header.get("kid"))
        else:
            jwk = await self._keys[issuer.issuer].key(header.get("kid"))
            if jwk.algorithm_name != alg and jwk._jwk_data.get("alg") is not None:
                raise TokenRefused(f"key {header.get('kid')!r} is not for {alg}")
            key = jwk.key
        held = self._held(issuer)
        required = ["exp", "iss"] + (["aud"] if issuer.audience else [])
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=issuer.audience, issuer=issuer.issuer,
                                leeway=self.leeway, options={"require": required})
        except jwt.ExpiredSignatureError:
            raise TokenRefused("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused("the token is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused(f"the token is not for this hub (aud must be {issuer.audience!r})") from None
        except jwt.InvalidSignatureError:
            raise TokenRefused("bad signature") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"the token has no {exc.claim} claim") from None
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"invalid token: {exc}") from None
        return principal_of(issuer, claims), issuer, held


def principal_of(issuer: Issuer, claims: dict[str, Any]) -> Principal:
    handle = claims.get(issuer.handle_claim)
    if not isinstance(handle, str) or not handle.strip():
        raise TokenRefused(f"the token has no handle (claim {issuer.handle_claim!r})")
    role = claims.get(issuer.role_claim, issuer.default_role)
    if role not in ROLES:
        raise TokenRefused(f"unknown role {role!r} (claim {issuer.role_claim!r}; roles: {', '.join(ROLES)})")
    subject = claims.get("sub")
    exp = claims.get("exp")
    return Principal(handle.strip().lstrip("@"), role, subject if isinstance(subject, str) else handle,
                     issuer.issuer, exp if isinstance(exp, int) else None)
