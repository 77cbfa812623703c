"""Rights a principal may hold on a namespace."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Right"]


class Right(StrEnum):
    READ = "read"
    WRITE = "write"
    DELETE = "delete"
    ADMIN = "admin"
