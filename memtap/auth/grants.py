"""Who may touch which memory: rights, grants over namespace patterns, and the compiled policy.

A principal holds grants: a namespace pattern (an ``fnmatch`` glob, case-sensitive, where
``*`` also matches ``/``; ``{principal}`` stands for the principal's own name) and the rights
it gives there. ``admin`` implies ``read``, ``write`` and ``delete``, and adds what only an
owner's administrator may do: change the access tags of items the principal does not own,
and purge. A principal may also act for requesters (``act_for`` globs; itself always) and
call upstreams (``upstreams`` globs; all by default).

A principal the policy does not name (a ``--api-key KEY=PRINCIPAL`` with no grants) gets
exactly ``{principal}: read, write, delete`` and acts only for itself. A ``local`` caller
(keyless loopback, stdio) is not checked at all; see docs/authorization.md.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from memtap.errors import ConfigError, Forbidden
from memtap.trace.models import Op

if TYPE_CHECKING:
    from memtap.auth.caller import Caller

__all__ = [
    "ALL_RIGHTS",
    "DEFAULT_GRANTS",
    "OWN_RIGHTS",
    "Grant",
    "Policy",
    "PrincipalPolicy",
    "Right",
    "parse_rights",
    "right_for",
]


class Right(StrEnum):
    READ = "read"
    WRITE = "write"
    DELETE = "delete"
    ADMIN = "admin"


ALL_RIGHTS = frozenset(Right)
OWN_RIGHTS = frozenset({Right.READ, Right.WRITE, Right.DELETE})
_PLACEHOLDER = "{principal}"
_GLOB_CHARS = re.compile(r"[*?\[]")
_CACHE_LIMIT = 1 << 16


def implied(rights: Iterable[Right]) -> frozenset[Right]:
    """``rights`` with what they imply (admin: everything)."""
    found = frozenset(rights)
    return ALL_RIGHTS if Right.ADMIN in found else found


def parse_rights(values: Iterable[str], where: str) -> frozenset[Right]:
    """Rights by name; an unknown one is a ConfigError naming ``where`` and the right."""
    rights: set[Right] = set()
    for value in values:
        name = str(value).strip().lower()
        try:
            rights.add(Right(name))
        except ValueError:
            known = ", ".join(r.value for r in Right)
            raise ConfigError(f"{where}: unknown right {value!r} (rights are {known})") from None
    return frozenset(rights)


@dataclass(frozen=True)
class Grant:
    """``rights`` on the namespaces ``pattern`` matches."""

    pattern: str
    rights: frozenset[Right]

    def __post_init__(self) -> None:
        object.__setattr__(self, "rights", implied(self.rights))
        unknown = re.findall(r"\{[^}]*\}", self.pattern.replace(_PLACEHOLDER, ""))
        if unknown:
            raise ConfigError(
                f"grant pattern {self.pattern!r}: unknown placeholder {unknown[0]} (only {_PLACEHOLDER})"
            )
        if not self.pattern:
            raise ConfigError("a grant pattern may not be empty")


DEFAULT_GRANTS = (Grant(_PLACEHOLDER, OWN_RIGHTS),)


@dataclass(frozen=True)
class PrincipalPolicy:
    """One principal's grants, the requesters it may act for and the upstreams it may call."""

    name: str
    grants: tuple[Grant, ...] = DEFAULT_GRANTS
    act_for: tuple[str, ...] = ()
    upstreams: tuple[str, ...] = ("*",)


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _matcher(pattern: str, principal: str) -> tuple[str | None, re.Pattern[str] | None]:
    """An exact name, or a compiled glob, for ``pattern`` with ``{principal}`` filled in."""
    filled = pattern.replace(_PLACEHOLDER, _glob_escape(principal))
    if not _GLOB_CHARS.search(filled):
        return filled, None
    return None, re.compile(fnmatch.translate(filled))


@dataclass
class _Compiled:
    """One principal's policy, compiled: exact names in dicts, globs as regular expressions."""

    policy: PrincipalPolicy
    exact: dict[str, frozenset[Right]] = field(default_factory=dict)
    globs: list[tuple[re.Pattern[str], frozenset[Right]]] = field(default_factory=list)
    act_exact: set[str] = field(default_factory=set)
    act_globs: list[re.Pattern[str]] = field(default_factory=list)
    up_exact: set[str] = field(default_factory=set)
    up_globs: list[re.Pattern[str]] = field(default_factory=list)

    @classmethod
    def of(cls, policy: PrincipalPolicy) -> _Compiled:
        compiled = cls(policy)
        for grant in policy.grants:
            exact, glob = _matcher(grant.pattern, policy.name)
            if exact is not None:
                compiled.exact[exact] = compiled.exact.get(exact, frozenset()) | grant.rights
            else:
                assert glob is not None
                compiled.globs.append((glob, grant.rights))
        for pattern in (policy.name, *policy.act_for):
            exact, glob = _matcher(pattern, policy.name)
            if exact is not None:
                compiled.act_exact.add(exact)
            elif glob is not None:
                compiled.act_globs.append(glob)
        for pattern in policy.upstreams:
            exact, glob = _matcher(pattern, policy.name)
            if exact is not None:
                compiled.up_exact.add(exact)
            elif glob is not None:
                compiled.up_globs.append(glob)
        return compiled

    def rights(self, namespace: str) -> frozenset[Right]:
        found = self.exact.get(namespace, frozenset())
        for glob, rights in self.globs:
            if glob.match(namespace) is not None:
                found = found | rights
        return found


class Policy:
    """Every principal's grants, compiled once; checks are a dict lookup after the first."""

    def __init__(self, principals: Iterable[PrincipalPolicy] = ()) -> None:
        self.principals: dict[str, PrincipalPolicy] = {}
        for each in principals:
            if each.name in self.principals:
                raise ConfigError(f"principal {each.name!r} is configured twice")
            self.principals[each.name] = each
        self._compiled: dict[str, _Compiled] = {
            name: _Compiled.of(each) for name, each in self.principals.items()
        }
        self._cache: dict[tuple[str, str], frozenset[Right]] = {}

    def _of(self, principal: str) -> _Compiled:
        found = self._compiled.get(principal)
        if found is None:  # a key with no grants configured: its own namespace only
            found = self._compiled[principal] = _Compiled.of(PrincipalPolicy(principal))
        return found

    def rights(self, caller: Caller, namespace: str) -> frozenset[Right]:
        """What ``caller`` may do on ``namespace`` (a JWT's scopes cap it; ``local``: everything)."""
        if caller.via == "local":
            return ALL_RIGHTS
        key = (caller.principal, namespace)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            found = self._cache[key] = self._of(caller.principal).rights(namespace)
        if caller.scopes is not None:
            found = found & implied(caller.scopes)
        return found

    def allows(self, caller: Caller, namespace: str, right: Right) -> bool:
        return caller.via == "local" or right in self.rights(caller, namespace)

    def check(self, caller: Caller, namespace: str, right: Right) -> None:
        """Raise :class:`Forbidden` unless ``caller`` holds ``right`` on ``namespace``."""
        if caller.via == "local":
            return
        rights = self.rights(caller, namespace)
        if right in rights:
            return
        if caller.scopes is not None and right in self._of(caller.principal).rights(namespace):
            why = f"its token's scopes ({', '.join(sorted(caller.scopes))}) do not include it"
        elif rights:
            why = f"its grants there give only {', '.join(r.value for r in Right if r in rights)}"
        elif caller.principal in self.principals:
            why = "none of its grants matches that namespace"
        else:
            why = "it has no grants configured, so it may use only the namespace named like it"
        who = f"principal {caller.principal!r}"
        raise Forbidden(f"{who} may not {right.value} namespace {namespace!r}: {why}")

    def may_act_for(self, caller: Caller, requester: str) -> bool:
        """Whether ``caller`` may ask on behalf of ``requester`` (itself always; ``local``: anyone)."""
        if caller.via == "local" or requester == caller.principal:
            return True
        compiled = self._of(caller.principal)
        if requester in compiled.act_exact:
            return True
        return any(glob.match(requester) is not None for glob in compiled.act_globs)

    def check_act_for(self, caller: Caller, requester: str) -> None:
        if not self.may_act_for(caller, requester):
            raise Forbidden(
                f"principal {caller.principal!r} may not act for requester {requester!r}: "
                "no act_for pattern of it matches that requester"
            )

    def may_call_upstream(self, caller: Caller, upstream: str) -> bool:
        if caller.via == "local":
            return True
        compiled = self._of(caller.principal)
        if upstream in compiled.up_exact:
            return True
        return any(glob.match(upstream) is not None for glob in compiled.up_globs)

    def check_upstream(self, caller: Caller, upstream: str) -> None:
        if not self.may_call_upstream(caller, upstream):
            raise Forbidden(
                f"principal {caller.principal!r} may not call upstream {upstream!r}: "
                "no upstreams pattern of it matches that server"
            )

    def unmatched(self, namespaces: Iterable[str]) -> list[str]:
        """A warning for each configured grant pattern that matches none of ``namespaces``."""
        known = list(namespaces)
        warnings = []
        for name, each in self.principals.items():
            for grant in each.grants:
                exact, glob = _matcher(grant.pattern, name)
                hit = exact in known if exact is not None else any(glob.match(ns) for ns in known)  # type: ignore[union-attr]
                if not hit:
                    warnings.append(
                        f"grant {grant.pattern!r} of principal {name!r} matches no namespace in the database"
                    )
        return warnings


def right_for(op: Op) -> Right | None:
    """The right a call of lifecycle ``op`` needs on its namespace (None: no memory touched).
    Tools memtap cannot classify (``control``) need ``write``: they may change anything."""
    return _RIGHT_OF_OP.get(op)


_RIGHT_OF_OP = {
    Op.RETRIEVE: Right.READ,
    Op.READ: Right.READ,
    Op.WRITE: Right.WRITE,
    Op.UPDATE: Right.WRITE,
    Op.DELETE: Right.DELETE,
    Op.CONTROL: Right.WRITE,
}
