"""Addresses and URLs a user gives: a cheap reachability check and a password mask.

:func:`check_address` tries one TCP connection (a few seconds at most) to the host and port of a
Ray address before anything waits on it: ``ray.init`` retries an address where nothing listens
for minutes, ``hpo submit``'s job client fails quickly but with another message.
:func:`mask_password` hides the password of every URL in a text (an Optuna storage such as
``postgresql://user:secret@host/db`` becomes ``postgresql://user:***@host/db``), so that what is
printed or written never holds it.

Standard library only: no Ray, no SQLAlchemy.
"""

from __future__ import annotations

import re
import socket
import urllib.parse

from hpo._errors import UsageError

__all__ = ["check_address", "mask_password"]

#: seconds one TCP connection attempt of :func:`check_address` may take
CONNECT_TIMEOUT_S = 3.0
# the port a Ray address without one means: ray:// (Ray Client), http(s) (the dashboard's job
# server), and a bare HOST (the GCS)
_DEFAULT_PORTS = {"ray": 10001, "http": 80, "https": 443, "": 6379}
# addresses ray.init resolves itself (a local Ray, the cluster of this node or job)
_NOT_NETWORK = ("auto", "local")

# scheme://user:password@ (the password greedy up to the last "@": over-masking a malformed
# URL is better than leaking part of its password), and a password=... query parameter
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*:)[^\s'\"]*@")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&\s'\"]*")


def mask_password(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``.

    >>> mask_password("postgresql://user:secret@host/db")
    'postgresql://user:***@host/db'
    """
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))


def check_address(address: str | None, where: str, what: str = "the Ray cluster",
                  timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`UsageError` (naming ``where``, e.g. ``--address``, and the value) when
    nothing accepts a TCP connection at ``address``'s host and port within ``timeout`` seconds.

    ``None``, ``auto`` and ``local`` are left to ``ray.init``. Accepts ``HOST:PORT``,
    ``ray://HOST:PORT`` and ``http(s)://HOST:PORT``; a missing port means Ray's default for the
    form (6379, 10001, 80 / 443). Opens one connection and closes it; sends nothing.
    """
    if address is None or address.strip().lower() in _NOT_NETWORK:
        return
    given = f"{where}={address!r}"
    scheme = ""
    rest = address.strip()
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise UsageError(f"{given}: expected HOST:PORT, ray://HOST:PORT or http://HOST:PORT")
    parts = urllib.parse.urlsplit("//" + rest)
    try:
        host, port = parts.hostname, parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:  # a port that is not a number in 0..65535
        raise UsageError(f"{given}: the port must be a number in 0..65535") from None
    if not host:
        raise UsageError(f"{given}: expected HOST:PORT, ray://HOST:PORT or http://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror:
        raise UsageError(f"cannot reach {what} at {given}: unknown host {host!r}") from None
    except TimeoutError:
        raise UsageError(f"cannot reach {what} at {given}: no answer from {host}:{port} within "
                         f"{timeout:g} s") from None
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise UsageError(f"cannot reach {what} at {given}: {reason} at {host}:{port} (is Ray "
                         f"running there?)") from None
