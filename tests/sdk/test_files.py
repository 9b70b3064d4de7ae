"""The SDK's file methods against a real server: uploads from a path, bytes, an open file and a
chunk iterator arrive byte-exact (sha256 both ways), downloads to bytes, a file or a loop,
from an offset; a download resumes with `Range` after a real TCP proxy cuts the connection,
and refuses to splice two versions of a file; a prompted transfer raises
`ApprovalPendingError` and goes through with its approval id once approved."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from shellgate import (
    ApprovalPendingError,
    AsyncClient,
    Client,
    NotFoundError,
    ServerUnreachableError,
    TransferError,
)
from tests.conftest import AGENT, LiveServer
from tests.faults.cuttable_proxy import CuttableProxy


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_upload_source_round_trips_byte_exact(
    client: Client, sdk_server: LiveServer, tmp_path: Path
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # several chunks and a ragged end
    local = tmp_path / "source.bin"
    local.write_bytes(data)

    def chunks() -> Iterator[bytes]:
        yield data[:5]
        yield data[5:]

    sources: dict[str, object] = {
        "path.bin": local,
        "str-path.bin": str(local),
        "bytes.bin": data,
        "stream.bin": io.BytesIO(data),
        "chunks.bin": chunks(),  # no Content-Length: sent chunked
    }
    (sdk_server.settings.workspace / "sdk-files").mkdir(exist_ok=True)
    for name, source in sources.items():
        stored = client.put_file(f"sdk-files/{name}", source, mode="0640")  # type: ignore[arg-type]
        assert stored.state == "completed" and stored.op == "write"
        assert stored.size == len(data) and stored.sha256 == sha256(data), name
        assert stored.mode == "0640"
        on_disk = sdk_server.settings.workspace / "sdk-files" / name
        assert sha256(on_disk.read_bytes()) == sha256(data), name
        assert on_disk.stat().st_mode & 0o777 == 0o640

    assert sha256(client.read_file("sdk-files/bytes.bin")) == sha256(data)
    assert client.read_file("sdk-files/bytes.bin", offset=len(data) - 17) == data[-17:]
    assert client.read_file("sdk-files/bytes.bin", offset=len(data)) == b""
    saved = client.download_file("sdk-files/path.bin", tmp_path / "down.bin")
    assert saved.size == len(data) and saved.sha256 == sha256(data)
    assert sha256((tmp_path / "down.bin").read_bytes()) == sha256(data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["down.bin", "source.bin"]
    into = io.BytesIO()
    assert client.download_file("sdk-files/chunks.bin", into).sha256 == sha256(data)
    assert into.getvalue() == data

    stat = client.stat_file("sdk-files/stream.bin", sha256=True)
    assert (stat.type, stat.size, stat.mode, stat.sha256) == (
        "file",
        len(data),
        "0640",
        sha256(data),
    )
    operations = client.list_file_operations(limit=5).data
    assert operations[0].op == "stat" and operations[0].path.endswith("sdk-files/stream.bin")


def test_put_file_with_parents_makes_the_directories(
    client: Client, sdk_server: LiveServer
) -> None:
    with pytest.raises(NotFoundError):
        client.put_file("sdk-parents/a/b.txt", b"x")
    stored = client.put_file("sdk-parents/a/b.txt", b"made\n", parents=True)
    assert stored.size == 5
    assert (sdk_server.settings.workspace / "sdk-parents/a/b.txt").read_bytes() == b"made\n"


@pytest.mark.anyio
async def test_async_put_file_with_parents(sdk_server: LiveServer) -> None:
    async with AsyncClient(sdk_server.base_url, AGENT) as client:
        await client.put_file("sdk-parents-async/a/b.txt", b"made\n", parents=True)
    assert (sdk_server.settings.workspace / "sdk-parents-async/a/b.txt").exists()


def test_refusals_and_the_dry_run(client: Client, sdk_server: LiveServer, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        client.read_file("sdk-files/absent.bin")
    with pytest.raises(NotFoundError):
        client.download_file("sdk-files/absent.bin", tmp_path / "absent.bin")
    assert not (tmp_path / "absent.bin").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind
    inside = client.check_file("notes.txt", access="write")
    assert inside.verdict == "allow" and inside.rule is None
    outside = client.check_file(str(tmp_path / "x"), access="read")
    assert outside.verdict == "prompt"


def test_a_server_that_cannot_be_reached_is_said_so_without_retrying() -> None:
    # Port 9 (discard) is closed on loopback: the connection is refused. Only a download that
    # began is resumed, so the first refusal is the answer, not "broke off 8 times in a row".
    with Client("http://127.0.0.1:9", AGENT, reconnects=8) as nowhere:
        with pytest.raises(ServerUnreachableError, match="cannot reach the server"):
            nowhere.read_file("anything.txt")
        with pytest.raises(ServerUnreachableError, match="cannot upload to"):
            nowhere.put_file("anything.txt", b"data")


def test_a_prompted_upload_waits_for_its_approval(
    client: Client, approver: Client, tmp_path: Path
) -> None:
    target = tmp_path / "outside.txt"  # outside the workspace: prompt by default
    with pytest.raises(ApprovalPendingError) as pending:
        client.put_file(str(target), b"from the sdk\n", approval_wait=0)
    assert pending.value.operation.state == "awaiting_approval"
    assert pending.value.approval_id.startswith("ap_")
    assert not target.exists()
    approver.approve(pending.value.approval_id)
    stored = client.put_file(str(target), b"from the sdk\n", approval_id=pending.value.approval_id)
    assert stored.state == "completed" and target.read_bytes() == b"from the sdk\n"


def test_cancelling_a_prompted_upload_rejects_it_and_names_the_operation(
    client: Client, approver: Client, tmp_path: Path
) -> None:
    target = tmp_path / "cancelled.txt"
    with pytest.raises(ApprovalPendingError) as pending:
        client.put_file(str(target), b"never\n", approval_wait=0)
    approval = approver.get_approval(pending.value.approval_id)
    assert approval.kind == "file" and approval.execution_id is None
    assert approval.file_operation_id == pending.value.operation.id
    cancelled = client.cancel_file_operation(pending.value.operation.id)
    assert cancelled.state == "rejected" and cancelled.execution_id is None
    assert approver.get_approval(pending.value.approval_id).state == "expired"
    assert not target.exists()


def test_a_download_resumes_after_the_connection_is_cut(
    client: Client, sdk_server: LiveServer, proxy: CuttableProxy
) -> None:
    # Larger than every socket buffer between the server and this loop, so a cut after the
    # first megabyte leaves most of the file unsent.
    data = os.urandom(24 * 1024 * 1024)
    (sdk_server.settings.workspace / "big.bin").write_bytes(data)
    received = bytearray()
    cut = False
    with Client(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy:
        for chunk in through_proxy.iter_file("big.bin"):
            received += chunk
            if not cut and len(received) >= 1024 * 1024:
                cut = True
                proxy.cut()
                proxy.start()
    assert proxy.accepted >= 2, "the download did not reconnect after the cut"
    assert len(received) == len(data) and sha256(bytes(received)) == sha256(data)


def test_a_resume_refuses_a_file_replaced_meanwhile(
    sdk_server: LiveServer, proxy: CuttableProxy
) -> None:
    path = sdk_server.settings.workspace / "replaced.bin"
    path.write_bytes(os.urandom(24 * 1024 * 1024))
    with Client(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy:
        chunks = through_proxy.iter_file("replaced.bin")
        next(chunks)
        # Same size, another mtime: another version (ETag) of the file.
        path.write_bytes(os.urandom(24 * 1024 * 1024))
        stat = path.stat()
        os.utime(path, (stat.st_atime, stat.st_mtime + 10))
        proxy.cut()
        proxy.start()
        with pytest.raises(TransferError, match="changed on the server"):
            for _ in chunks:
                pass


@pytest.mark.anyio
async def test_async_files_round_trip_and_resume(
    sdk_server: LiveServer, proxy: CuttableProxy, tmp_path: Path
) -> None:
    data = os.urandom(24 * 1024 * 1024 + 5)
    local = tmp_path / "async-source.bin"
    await anyio.Path(local).write_bytes(data)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 4 * 1024 * 1024):
            yield data[start : start + 4 * 1024 * 1024]

    (sdk_server.settings.workspace / "async").mkdir(exist_ok=True)
    async with AsyncClient(sdk_server.base_url, AGENT) as direct:
        from_path = await direct.put_file("async/from-path.bin", local)
        from_chunks = await direct.put_file("async/from-chunks.bin", chunks())
        assert from_path.sha256 == from_chunks.sha256 == sha256(data)
        saved = await direct.download_file("async/from-chunks.bin", tmp_path / "back.bin")
        assert saved.size == len(data) and saved.sha256 == sha256(data)
        assert (await direct.stat_file("async/from-path.bin")).size == len(data)
    received = bytearray()
    async with AsyncClient(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy:
        with anyio.fail_after(60):
            async for chunk in through_proxy.iter_file("async/from-path.bin"):
                received += chunk
                if proxy.accepted == 1 and len(received) >= 1024 * 1024:
                    proxy.cut()
                    proxy.start()
    assert proxy.accepted >= 2
    assert sha256(bytes(received)) == sha256(data)
