"""Addresses and URLs a user gives: the cheap reachability check and the password mask."""

from __future__ import annotations

import socket
import time

import pytest

from hpo._errors import UsageError
from hpo._net import check_address, mask_password


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("url", "masked"), [
    ("postgresql://user:secret@host/db", "postgresql://user:***@host/db"),
    ("mysql+pymysql://u:p%40ss@h:3306/x", "mysql+pymysql://u:***@h:3306/x"),
    ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),  # an unescaped "@" in it
    ("postgresql://u@h/db?password=secret&sslmode=require",
     "postgresql://u@h/db?password=***&sslmode=require"),
    ("sqlite:///runs/x/study.db", "sqlite:///runs/x/study.db"),
    ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
])
def test_mask_password_hides_only_the_password(url: str, masked: str) -> None:
    # the password is replaced, the rest of the URL kept as given
    assert mask_password(url) == masked
    # also inside a longer message
    assert mask_password(f"cannot reach {url!r}: refused") == f"cannot reach {masked!r}: refused"


def test_check_address_refused_port_fails_fast_naming_flag_and_value() -> None:
    port = _closed_port()
    t0 = time.monotonic()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", f"http://127.0.0.1:{port}"):
        with pytest.raises(UsageError) as info:
            check_address(address, "--address")
        # one line naming the flag and the value
        assert f"--address={address!r}" in str(info.value) and "\n" not in str(info.value)
    # a refused connection is told at once, not after Ray's minutes of retries
    assert time.monotonic() - t0 < 5


def test_check_address_accepts_a_listening_port_and_leaves_ray_forms_alone() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        # something accepts connections there: no error
        check_address(f"127.0.0.1:{port}", "--address")
        check_address(f"ray://127.0.0.1:{port}", "--address")
    # what ray.init resolves itself is not checked
    for address in (None, "auto", "local"):
        check_address(address, "--address")


@pytest.mark.parametrize("address", ["127.0.0.1:http", "ftp://127.0.0.1:21", "ray://:10001"])
def test_check_address_rejects_a_malformed_address(address: str) -> None:
    # a malformed address is named with its flag, without trying to connect
    with pytest.raises(UsageError, match=r"--address="):
        check_address(address, "--address")
