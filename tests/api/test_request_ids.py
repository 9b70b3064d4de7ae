"""Request ids the server makes (README "Logs"): 32 hex digits, unique, and not repeated by a
forked child; a gateway's acceptable id is kept."""

from __future__ import annotations

import os
import re

from app.api.middleware import incoming_request_id

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def test_made_ids_are_32_hex_digits_and_unique() -> None:
    ids = [incoming_request_id({"headers": []}) for _ in range(20_000)]
    assert all(HEX32.match(made) for made in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write_end, incoming_request_id({"headers": []}).encode())
        os._exit(0)
    os.close(write_end)
    child_id = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert HEX32.match(child_id)
    assert child_id != incoming_request_id({"headers": []})


def test_a_gateways_id_is_kept_and_a_bad_one_replaced() -> None:
    kept = incoming_request_id({"headers": [(b"x-request-id", b"gw-123:abc")]})
    assert kept == "gw-123:abc"
    replaced = incoming_request_id({"headers": [(b"x-request-id", b"bad id\r\n")]})
    assert HEX32.match(replaced)
