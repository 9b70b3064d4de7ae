"""Ids from the urandom pool: the shape `secrets.token_urlsafe` gave, never repeated, and a
forked child never hands out its parent's next ids."""

from __future__ import annotations

import os
import re
import secrets

from app.core.random_ids import POOL_BYTES, random_token

URL_SAFE_20 = re.compile(r"^[A-Za-z0-9_-]{20}$")


def test_ids_keep_the_shape_and_never_repeat_across_many_pool_refills() -> None:
    count = 3 * POOL_BYTES  # ~37 refills of the pool
    tokens = [random_token(15) for _ in range(count)]
    assert all(URL_SAFE_20.match(token) for token in tokens)
    assert len(set(tokens)) == count


def test_a_request_larger_than_the_pool_is_served_whole() -> None:
    assert len(random_token(POOL_BYTES + 1)) == len(secrets.token_urlsafe(POOL_BYTES + 1))


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    random_token(15)  # the pool holds unused bytes now, which a fork must not share
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        os.close(read_end)
        os.write(write_end, " ".join(random_token(15) for _ in range(5)).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {random_token(15) for _ in range(5)}
    assert len(child) == 5
    assert not child & parent
