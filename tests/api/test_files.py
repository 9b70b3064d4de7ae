"""The files API through a real server (docs/api.md#files): byte-exact streamed round trips,
`Range`, the size cap, the policy's `files` rules with prompts through real approvals, and odd
paths that must never produce a 500. Every path written lives under the test's tmp dir."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases, ServerDatabase
from tests.waiting import eventually

CAP = 64 * 1024


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    with serve(
        make_settings(
            tmp_path_factory.mktemp("files"),
            module_databases.new(),
            files_max_bytes=64 * 1024 * 1024,
        )
    ) as server:
        yield server


@pytest.fixture
def alice(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(AGENT) as client:
        yield client


@pytest.fixture
def carol(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(APPROVER) as client:
        yield client


@pytest.fixture
def files_rules(live: LiveServer) -> Iterator[Any]:
    """Install `files` rules for one test; the default policy comes back afterwards."""
    with live.client(ADMIN) as root:

        def install(files: dict[str, Any]) -> None:
            response = root.put("/v1/policy", json={"files": files})
            assert response.status_code == 200, response.text

        yield install
        root.put("/v1/policy", json={})


@pytest.fixture
def workspace(live: LiveServer) -> Path:
    return live.settings.workspace


@pytest.fixture
def outside(live: LiveServer, tmp_path: Path) -> Path:
    """A directory outside the workspace, still inside this test's tmp dir."""
    directory = tmp_path / "outside"
    directory.mkdir()
    return directory


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def in_background(call: Any) -> Future[httpx.Response]:
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def pending_file_approval(client: httpx.Client, needle: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        items = client.get("/v1/approvals", params={"state": "pending"}).json()["data"]
        return next((item for item in items if needle in item["command"]), None)

    return eventually(probe, what=f"an approval for {needle}")


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [3 * 1024 * 1024 + 7, 0])
def test_upload_then_download_is_byte_exact(
    alice: httpx.Client, workspace: Path, size: int
) -> None:
    data = os.urandom(size)
    name = f"blob-{size}.bin"
    put = alice.put("/v1/files", params={"path": name}, content=data)
    assert put.status_code == 201, put.text
    record = put.json()
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["size"] == size
    assert record["state"] == "completed" and record["verdict"] == "allow"
    assert record["path"] == str(workspace / name)
    assert (workspace / name).read_bytes() == data

    got = alice.get("/v1/files", params={"path": str(workspace / name)})
    assert got.status_code == 200
    assert got.headers["content-length"] == str(size)
    assert got.headers["etag"]
    assert hashlib.sha256(got.content).hexdigest() == hashlib.sha256(data).hexdigest()

    stat = alice.get("/v1/files/stat", params={"path": name, "sha256": "true"}).json()
    assert stat["type"] == "file" and stat["size"] == size
    assert stat["sha256"] == hashlib.sha256(data).hexdigest()
    assert alice.get("/v1/files/stat", params={"path": name}).json()["sha256"] is None


def test_a_streamed_upload_without_content_length_and_its_mode(
    alice: httpx.Client, workspace: Path
) -> None:
    chunks = [os.urandom(100_000) for _ in range(5)]
    put = alice.put(
        "/v1/files", params={"path": "streamed.bin", "mode": "0600"}, content=iter(chunks)
    )
    assert put.status_code == 201, put.text
    assert (workspace / "streamed.bin").read_bytes() == b"".join(chunks)
    assert put.json()["mode"] == "0600"
    assert alice.get("/v1/files/stat", params={"path": "streamed.bin"}).json()["mode"] == "0600"
    # A replacement keeps the mode the file had unless told otherwise.
    assert alice.put("/v1/files", params={"path": "streamed.bin"}, content=b"x").status_code == 201
    assert (workspace / "streamed.bin").stat().st_mode & 0o7777 == 0o600


@pytest.mark.parametrize("mode", ["4755", "2755", "6755", "0o4700", "02000", "7777"])
def test_a_setuid_or_setgid_mode_is_refused_and_nothing_is_written(
    alice: httpx.Client, workspace: Path, mode: str
) -> None:
    name = f"suid-{mode}.sh"
    response = alice.put("/v1/files", params={"path": name, "mode": mode}, content=b"#!/bin/sh\n")
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert error["message"] == (
        f"mode {mode} sets the setuid or setgid bit; shellgate does not create such files"
    )
    assert [p.name for p in workspace.iterdir() if name in p.name] == []  # no temporary either
    operations = alice.get("/v1/files/operations").json()["data"]
    assert not [op for op in operations if op["path"] == str(workspace / name)]


def test_a_setuid_mode_leaves_the_file_it_would_replace_as_it_was(
    alice: httpx.Client, workspace: Path
) -> None:
    target = workspace / "kept-mode.sh"
    target.write_bytes(b"old")
    target.chmod(0o755)
    response = alice.put("/v1/files", params={"path": target.name, "mode": "4755"}, content=b"new")
    assert response.status_code == 422, response.text
    assert target.read_bytes() == b"old"
    assert target.stat().st_mode & 0o7777 == 0o755


def test_a_replaced_setuid_file_keeps_its_mode_but_not_setuid_or_setgid(
    alice: httpx.Client, workspace: Path
) -> None:
    # As a command's write would: the kernel clears both bits when an unprivileged writer
    # changes a file, so new content never runs with the old file's owner or group.
    target = workspace / "was-setuid.sh"
    target.write_bytes(b"old")
    target.chmod(0o6755)
    response = alice.put("/v1/files", params={"path": target.name}, content=b"new")
    assert response.status_code == 201, response.text
    assert response.json()["mode"] == "0755"
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o7777 == 0o755


def test_the_sticky_bit_is_an_allowed_mode(alice: httpx.Client, workspace: Path) -> None:
    response = alice.put("/v1/files", params={"path": "sticky.bin", "mode": "1644"}, content=b"x")
    assert response.status_code == 201, response.text
    assert (workspace / "sticky.bin").stat().st_mode & 0o7777 == 0o1644


def test_range_requests(alice: httpx.Client, workspace: Path) -> None:
    data = bytes(range(256)) * 4
    (workspace / "ranged.bin").write_bytes(data)
    params = {"path": "ranged.bin"}
    part = alice.get("/v1/files", params=params, headers={"Range": "bytes=10-19"})
    assert part.status_code == 206
    assert part.content == data[10:20]
    assert part.headers["content-range"] == f"bytes 10-19/{len(data)}"
    tail = alice.get("/v1/files", params=params, headers={"Range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == data[-5:]
    rest = alice.get("/v1/files", params=params, headers={"Range": "bytes=1000-"})
    assert rest.status_code == 206 and rest.content == data[1000:]
    past = alice.get("/v1/files", params=params, headers={"Range": "bytes=5000-"})
    assert past.status_code == 416
    assert past.headers["content-range"] == f"bytes */{len(data)}"


def _last_read_of(client: httpx.Client, path: Path) -> tuple[str, str | None]:
    """The state and message of the newest recorded read of `path`."""
    operations = client.get("/v1/files/operations").json()["data"]
    reads = [op for op in operations if op["op"] == "read" and op["path"] == str(path)]
    return reads[0]["state"], reads[0]["message"]


@pytest.mark.parametrize(
    "header", ["bytes=abc", "bytes=5-2", "items=0-1", "bytes", "bytes=-", "bytes=,", "bytes=-x"]
)
def test_a_malformed_range_is_a_400_in_the_error_envelope(
    alice: httpx.Client, workspace: Path, header: str
) -> None:
    (workspace / "ranged.bin").write_bytes(bytes(range(256)) * 4)
    response = alice.get("/v1/files", params={"path": "ranged.bin"}, headers={"Range": header})
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["code"] == "bad_request"
    assert error["message"].startswith(f"Range {header!r} is not a byte range"), error
    assert error["request_id"] == response.headers["x-request-id"]
    assert _last_read_of(alice, workspace / "ranged.bin") == ("failed", error["message"])


@pytest.mark.parametrize(
    ("content", "header"),
    [(b"x" * 1024, "bytes=1024-"), (b"x" * 1024, "bytes=2000-2010,3000-"), (b"", "bytes=0-")],
)
def test_an_unsatisfiable_range_is_a_416_in_the_error_envelope(
    alice: httpx.Client, workspace: Path, content: bytes, header: str
) -> None:
    (workspace / "short.bin").write_bytes(content)
    response = alice.get("/v1/files", params={"path": "short.bin"}, headers={"Range": header})
    assert response.status_code == 416, response.text
    assert response.headers["content-range"] == f"bytes */{len(content)}"
    error = error_of(response)
    assert error["code"] == "range_not_satisfiable"
    assert error["message"] == (
        f"Range {header!r} asks for no byte of the file, which is {len(content)} bytes long"
    )
    assert _last_read_of(alice, workspace / "short.bin") == ("failed", error["message"])


def test_a_range_that_if_range_sets_aside_sends_the_file_and_records_the_read(
    alice: httpx.Client, workspace: Path
) -> None:
    (workspace / "changed.bin").write_bytes(b"y" * 100)
    headers = {"Range": "bytes=5000-", "If-Range": '"an-old-etag"'}
    response = alice.get("/v1/files", params={"path": "changed.bin"}, headers=headers)
    assert response.status_code == 200 and response.content == b"y" * 100
    assert _last_read_of(alice, workspace / "changed.bin") == ("completed", None)


def test_more_ranges_than_the_server_serves_are_ignored(
    alice: httpx.Client, workspace: Path
) -> None:
    # Over 100 ranges the header is ignored (RFC 9110 lets a server do so): the whole file.
    data = os.urandom(4096)
    (workspace / "many.bin").write_bytes(data)
    header = "bytes=" + ",".join(f"{n * 10}-{n * 10 + 1}" for n in range(101))
    response = alice.get("/v1/files", params={"path": "many.bin"}, headers={"Range": header})
    assert response.status_code == 200
    assert response.content == data


def test_over_the_cap_is_413_and_the_old_file_is_intact(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with (
        serve(make_settings(tmp_path, database, files_max_bytes=CAP)) as server,
        server.client() as alice,
    ):
        target = server.settings.workspace / "kept.txt"
        target.write_bytes(b"old contents")
        declared = alice.put("/v1/files", params={"path": "kept.txt"}, content=os.urandom(CAP + 1))
        assert declared.status_code == 413
        assert "SHELLGATE_FILES_MAX_BYTES" in error_of(declared)["message"]
        # Without a Content-Length the cap is found while streaming.
        chunks = iter([os.urandom(16 * 1024) for _ in range(8)])
        streamed = alice.put("/v1/files", params={"path": "kept.txt"}, content=chunks)
        assert streamed.status_code == 413
        assert target.read_bytes() == b"old contents"
        assert sorted(p.name for p in server.settings.workspace.iterdir()) == ["kept.txt"]
        at_cap = alice.put("/v1/files", params={"path": "kept.txt"}, content=b"y" * CAP)
        assert at_cap.status_code == 201
        operations = alice.get("/v1/files/operations").json()["data"]
        assert [op["state"] for op in operations[:3]] == ["completed", "failed", "failed"]


# --- paths that are not files -----------------------------------------------------------------


def test_directories_missing_files_and_fifos_are_clear_4xx(
    alice: httpx.Client, workspace: Path
) -> None:
    (workspace / "adir").mkdir(exist_ok=True)
    assert alice.get("/v1/files", params={"path": "adir"}).status_code == 409
    put_dir = alice.put("/v1/files", params={"path": "adir"}, content=b"x")
    assert put_dir.status_code == 409 and "directory" in error_of(put_dir)["message"]
    assert alice.get("/v1/files/stat", params={"path": "adir"}).json()["type"] == "directory"
    assert alice.get("/v1/files", params={"path": "no-such-file"}).status_code == 404
    assert alice.get("/v1/files/stat", params={"path": "no-such-file"}).status_code == 404
    missing_dir = alice.put("/v1/files", params={"path": "no-such-dir/f"}, content=b"x")
    assert missing_dir.status_code == 404
    fifo = workspace / "a-fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    assert alice.get("/v1/files", params={"path": "a-fifo"}).status_code == 409  # not blocked


def test_a_symlink_to_a_name_that_is_not_utf8_is_a_clear_409_and_writes_nothing(
    alice: httpx.Client, workspace: Path
) -> None:
    # A command may make such names (`ln -s $'\xffname' link`); the path asked for is text, but
    # where it leads is not: it raised out of the record's insert (a 500).
    target = os.fsencode(workspace) + b"/\xffname"
    with open(target, "wb") as file:
        file.write(b"hi")
    os.symlink(b"\xffdir", os.fsencode(workspace) + b"/dir-link")
    os.mkdir(os.fsencode(workspace) + b"/\xffdir")
    link = workspace / "odd-link"
    link.unlink(missing_ok=True)
    os.symlink(target, os.fsencode(link))
    before = alice.get("/v1/files/operations").json()["data"]
    for method, path in [
        ("GET", "/v1/files"),
        ("GET", "/v1/files/stat"),
        ("PUT", "/v1/files"),
    ]:
        for name in ("odd-link", "dir-link/new-file"):
            response = alice.request(method, path, params={"path": name}, content=b"new")
            assert response.status_code == 409, (method, name, response.text)
            message = error_of(response)["message"]
            assert "not UTF-8" in message and "\\xff" in message, message
    with open(target, "rb") as file:
        assert file.read() == b"hi"  # not written
    assert not os.path.exists(os.fsencode(workspace) + b"/\xffdir/new-file")
    assert alice.get("/v1/files/operations").json()["data"] == before  # nothing recorded


@pytest.mark.parametrize("path", ["not-yet-a-dir/", "not-yet-a-dir/.", "adir/", "adir/sub/.."])
def test_an_upload_to_a_path_that_names_a_directory_writes_no_file(
    alice: httpx.Client, workspace: Path, path: str
) -> None:
    # POSIX creates no file called `not-yet-a-dir` for `not-yet-a-dir/`; neither does this.
    (workspace / "adir" / "sub").mkdir(parents=True, exist_ok=True)
    response = alice.put("/v1/files", params={"path": path}, content=b"x")
    assert response.status_code == 422, response.text
    assert "names a directory" in error_of(response)["message"]
    assert not (workspace / "not-yet-a-dir").exists()
    assert (workspace / "adir").is_dir()


@pytest.mark.parametrize(
    "raw_query",
    [
        "path=",
        "path=%00",
        "path=a%00b",
        "path=%ff%fe%fd",
        "path=" + "a" * 5000,
        "path=" + "/".join(["b" * 255] * 20),
        "path=" + "c" * 300,
        "path=%2e%2e%2f%2e%2e%2f%2e%2e",
        "path=~nosuchuser-x/y",
        "path=%C0%AF",
        "mode=9999&path=z",
    ],
)
def test_odd_paths_never_give_a_500(live: LiveServer, alice: httpx.Client, raw_query: str) -> None:
    for method, route in (("GET", "/v1/files"), ("GET", "/v1/files/stat"), ("PUT", "/v1/files")):
        url = f"{live.base_url}{route}?{raw_query}&approval_wait=0"
        response = alice.request(method, url, content=b"data" if method == "PUT" else None)
        assert 200 <= response.status_code < 500, (method, raw_query, response.text)
        assert response.status_code != 201 or "%00" not in raw_query


# --- the policy ---------------------------------------------------------------------------------


def test_files_rules_deny_per_access(
    alice: httpx.Client, workspace: Path, files_rules: Any
) -> None:
    (workspace / "secret.key").write_text("s3cret")
    files_rules({"rules": [{"match": "*.key", "approval": "deny", "access": "write"}]})
    assert alice.get("/v1/files", params={"path": "secret.key"}).content == b"s3cret"
    refused = alice.put("/v1/files", params={"path": "secret.key"}, content=b"overwritten")
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "policy_denied"
    assert "*.key" in error_of(refused)["message"]
    assert (workspace / "secret.key").read_text() == "s3cret"
    files_rules({"rules": [{"match": "*.key", "approval": "deny"}]})
    assert alice.get("/v1/files", params={"path": "secret.key"}).status_code == 403
    assert alice.get("/v1/files/stat", params={"path": "secret.key"}).status_code == 403
    denied = alice.get("/v1/files/operations").json()["data"][0]
    assert denied["verdict"] == "deny" and denied["state"] == "denied"


def test_a_symlink_escaping_the_workspace_is_judged_outside(
    alice: httpx.Client, carol: httpx.Client, workspace: Path, outside: Path, files_rules: Any
) -> None:
    (outside / "target.txt").write_text("from outside")
    link = workspace / f"escape-{outside.parent.name}"
    link.symlink_to(outside / "target.txt")
    files_rules({"outside": "deny"})
    refused = alice.get("/v1/files", params={"path": link.name})
    assert refused.status_code == 403
    assert str(outside / "target.txt") in error_of(refused)["message"]
    overwrite = alice.put("/v1/files", params={"path": link.name}, content=b"x")
    assert overwrite.status_code == 403
    assert (outside / "target.txt").read_text() == "from outside"
    traversal = alice.get(
        "/v1/files", params={"path": f"../{outside.parent.name}/outside/target.txt"}
    )
    assert traversal.status_code in (403, 404)


def test_the_servers_processes_are_never_served_whatever_the_rules(
    alice: httpx.Client, workspace: Path, files_rules: Any
) -> None:
    """/proc/self is the server (its environment holds every token); a window of
    /proc/self/environ read at an offset returns it whatever its size says. Reached directly,
    through /dev/fd (a link into /proc/self/fd) or through a link in the workspace, with every
    path outside the workspace allowed: 403, for a read, a stat, a write and the dry run."""
    link = workspace / "environ-link"
    link.unlink(missing_ok=True)
    link.symlink_to("/proc/self/environ")
    files_rules({"outside": "allow"})
    assert alice.get("/v1/files", params={"path": "/etc/hostname"}).status_code == 200
    for path in ("/proc/self/environ", f"/proc/{os.getpid()}/cmdline", "/dev/fd/0", link.name):
        read = alice.get("/v1/files", params={"path": path})
        assert read.status_code == 403, (path, read.text)
        assert error_of(read)["code"] == "policy_denied"
        assert "which the files API never serves" in error_of(read)["message"]
        stat = alice.get("/v1/files/stat", params={"path": path, "sha256": "true"})
        assert stat.status_code == 403, (path, stat.text)
        check = alice.get("/v1/files/check", params={"path": path, "access": "read"}).json()
        assert check["verdict"] == "deny", (path, check)
    write = alice.put("/v1/files", params={"path": "/proc/self/comm"}, content=b"renamed")
    assert write.status_code == 403, write.text
    with open("/proc/self/comm") as comm:
        assert comm.read() != "renamed"


def test_a_file_the_kernel_makes_up_on_read_is_sent_whole_at_its_real_size(
    alice: httpx.Client, files_rules: Any
) -> None:
    """sysfs says 4096 bytes for every attribute and gives the few it has: the download said
    `Content-Length: 4096`, sent those and cut the connection, recorded as a file that shrank.
    Its bytes are read first, and their size is the one announced, stat'd and recorded."""
    files_rules({"outside": "allow"})
    path = "/sys/class/net/lo/address"
    real = Path(path).read_bytes()
    assert os.stat(path).st_size != len(real)  # what this is about
    read = alice.get("/v1/files", params={"path": path})
    assert read.status_code == 200, read.text
    assert read.content == real
    assert read.headers["content-length"] == str(len(real))
    stat = alice.get("/v1/files/stat", params={"path": path, "sha256": "true"}).json()
    assert stat["size"] == len(real), stat
    assert stat["sha256"] == hashlib.sha256(real).hexdigest()
    ranged = alice.get("/v1/files", params={"path": path}, headers={"Range": "bytes=0-1"})
    assert (ranged.status_code, ranged.content) == (206, real[:2])
    records = alice.get("/v1/files/operations", params={"limit": 3}).json()["data"]
    assert next(r["state"] for r in records if r["op"] == "read") == "completed", records


def test_parents_makes_the_missing_directories(alice: httpx.Client, workspace: Path) -> None:
    made = alice.put(
        "/v1/files", params={"path": "pa/b/c.txt", "parents": "true"}, content=b"deep\n"
    )
    assert made.status_code == 201, made.text
    assert (workspace / "pa" / "b" / "c.txt").read_bytes() == b"deep\n"
    assert (workspace / "pa" / "b").is_dir()
    # Existing directories are fine, and without `parents` a missing one is still a 404.
    again = alice.put("/v1/files", params={"path": "pa/b/d.txt", "parents": "true"}, content=b"")
    assert again.status_code == 201
    without = alice.put("/v1/files", params={"path": "pa/x/e.txt"}, content=b"")
    assert without.status_code == 404
    assert not (workspace / "pa" / "x").exists()


def test_parents_judges_each_directory_it_would_make(
    live: LiveServer,
    alice: httpx.Client,
    carol: httpx.Client,
    workspace: Path,
    files_rules: Any,
) -> None:
    files_rules({"rules": [{"match": f"{workspace}/locked", "approval": "deny"}]})
    refused = alice.put(
        "/v1/files", params={"path": "locked/inner/f.txt", "parents": "true"}, content=b"x"
    )
    assert refused.status_code == 403, refused.text
    assert f"{workspace}/locked" in error_of(refused)["message"]
    assert not (workspace / "locked").exists()
    files_rules({"rules": [{"match": f"{workspace}/asked/*", "approval": "prompt"}]})
    asked = alice.put(
        "/v1/files",
        params={"path": "asked/inner/f.txt", "parents": "true", "approval_wait": 0},
        content=b"x",
    )
    assert asked.status_code == 202, asked.text
    assert not (workspace / "asked").exists()
    approval = carol.get(f"/v1/approvals/{asked.json()['approval_id']}").json()
    assert f"making {workspace}/asked/, {workspace}/asked/inner/" in approval["command"]


def test_outside_the_workspace_prompts_by_default_and_runs_once_approved(
    live: LiveServer, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    target = outside / "approved.bin"
    data = os.urandom(70_000)
    asked = alice.put("/v1/files", params={"path": str(target), "approval_wait": 0}, content=data)
    assert asked.status_code == 202, asked.text
    record = asked.json()
    assert record["state"] == "awaiting_approval" and record["verdict"] == "prompt"
    assert not target.exists()
    approval = carol.get(f"/v1/approvals/{record['approval_id']}").json()
    assert approval["command"] == f"[file write] {target} (70000 bytes)"
    assert "outside the workspace" in approval["reason"]
    # The approval names the operation itself: no execution record stands in for it.
    assert approval["kind"] == "file" and approval["file_operation_id"] == record["id"]
    assert approval["subject"] == "file_operation" and approval["execution_id"] is None
    assert approval["execution_id"] is None and record["execution_id"] is None
    # Retrying before the decision waits and answers 202 again.
    again = alice.put(
        "/v1/files",
        params={"path": str(target), "approval_wait": 0, "approval_id": record["approval_id"]},
        content=data,
    )
    assert again.status_code == 202
    assert carol.post(f"/v1/approvals/{record['approval_id']}/approve", json={}).status_code == 200
    done = alice.put(
        "/v1/files",
        params={"path": str(target), "approval_id": record["approval_id"]},
        content=data,
    )
    assert done.status_code == 201, done.text
    assert target.read_bytes() == data
    # The approval is spent.
    spent = alice.put(
        "/v1/files",
        params={"path": str(target), "approval_id": record["approval_id"]},
        content=b"again",
    )
    assert spent.status_code == 409
    listed = alice.get("/v1/executions", params={"limit": 500}).json()["data"]
    assert not [item for item in listed if item["command"].startswith("[file ")]


def test_a_prompted_read_waits_for_the_decision(
    live: LiveServer, carol: httpx.Client, outside: Path
) -> None:
    (outside / "wait.txt").write_text("worth the wait")

    def read() -> httpx.Response:
        with live.client(AGENT) as client:
            return client.get("/v1/files", params={"path": str(outside / "wait.txt")})

    waiting = in_background(read)
    approval = pending_file_approval(carol, str(outside / "wait.txt"))
    assert approval["command"].startswith("[file read] ")
    assert not waiting.done()
    carol.post(f"/v1/approvals/{approval['id']}/approve", json={})
    response = waiting.result(timeout=30)
    assert response.status_code == 200 and response.text == "worth the wait"


def test_a_rejected_prompt_is_403_and_the_file_is_untouched(
    live: LiveServer, carol: httpx.Client, outside: Path
) -> None:
    target = outside / "never.txt"

    def write() -> httpx.Response:
        with live.client(AGENT) as client:
            return client.put("/v1/files", params={"path": str(target)}, content=b"no")

    waiting = in_background(write)
    approval = pending_file_approval(carol, str(target))
    carol.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "not there"})
    response = waiting.result(timeout=30)
    assert response.status_code == 403
    assert error_of(response)["code"] == "approval_rejected"
    assert "not there" in error_of(response)["message"]
    assert not target.exists()
    with live.client(AGENT) as client:
        operations = client.get("/v1/files/operations").json()["data"]
    record = next(op for op in operations if op["approval_id"] == approval["id"])
    assert record["state"] == "rejected" and "not there" in record["message"]
    assert record["finished_at"] is not None


def test_approvers_decide_but_do_not_move_files(carol: httpx.Client) -> None:
    assert carol.get("/v1/files", params={"path": "anything"}).status_code == 403


def test_the_policy_document_carries_the_files_defaults(live: LiveServer) -> None:
    with live.client(ADMIN) as root:
        files = root.get("/v1/policy").json()["files"]
    assert files == {"workspace": "allow", "outside": "prompt", "rules": []}
    with live.client(ADMIN) as root:
        bad = root.put(
            "/v1/policy", json={"files": {"rules": [{"match": "rel/*", "approval": "deny"}]}}
        )
        assert bad.status_code == 422


def test_the_dry_run_judges_both_paths_and_records_nothing(
    alice: httpx.Client, carol: httpx.Client, workspace: Path, outside: Path, files_rules: Any
) -> None:
    link = workspace / f"check-{outside.parent.name}"
    link.symlink_to(outside)
    files_rules({"rules": [{"match": f"{outside}/*", "approval": "deny", "access": "write"}]})
    before = alice.get("/v1/files/operations").json()["data"]
    write = carol.get(
        "/v1/files/check", params={"path": f"{link.name}/x", "access": "write"}
    ).json()
    assert write["verdict"] == "deny"
    assert write["judged_path"] == str(outside / "x") == write["resolved_path"]
    assert write["path"] == str(link / "x")
    assert write["rule"] == {"match": f"{outside}/*", "approval": "deny", "access": "write"}
    read = carol.get("/v1/files/check", params={"path": f"{link.name}/x"}).json()
    assert read["verdict"] == "prompt" and "outside the workspace" in read["reason"]
    inside = carol.get("/v1/files/check", params={"path": "plain.txt"}).json()
    assert inside["verdict"] == "allow" and inside["rule"] is None
    assert alice.get("/v1/files/operations").json()["data"] == before


def test_cancelling_a_file_operation_withdraws_its_approval(
    live: LiveServer, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    target = outside / "withdrawn.txt"
    asked = alice.put("/v1/files", params={"path": str(target), "approval_wait": 0}, content=b"x")
    assert asked.status_code == 202
    record = asked.json()
    with live.client(AGENT2) as bob:
        assert bob.post(f"/v1/files/operations/{record['id']}/cancel").status_code == 404
    cancelled = alice.post(f"/v1/files/operations/{record['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "rejected"
    assert "cancelled by its requester" in cancelled.json()["message"]
    assert cancelled.json()["finished_at"] is not None
    approval = carol.get(f"/v1/approvals/{record['approval_id']}").json()
    assert approval["state"] == "expired" and approval["decided_by"] == "alice"
    again = alice.post(f"/v1/files/operations/{record['id']}/cancel")
    assert again.status_code == 409
    retry = alice.put(
        "/v1/files",
        params={"path": str(target), "approval_id": record["approval_id"]},
        content=b"x",
    )
    assert retry.status_code == 403
    assert error_of(retry)["code"] == "approval_rejected"
    assert not target.exists()
    operations = {op["id"]: op for op in alice.get("/v1/files/operations").json()["data"]}
    assert operations[record["id"]]["state"] == "rejected"


def test_an_approval_id_is_only_for_its_own_operation_and_caller(
    live: LiveServer, alice: httpx.Client, outside: Path
) -> None:
    target = outside / "mine.txt"
    asked = alice.put("/v1/files", params={"path": str(target), "approval_wait": 0}, content=b"x")
    approval_id = asked.json()["approval_id"]
    other_path = alice.put(
        "/v1/files",
        params={"path": str(outside / "other.txt"), "approval_id": approval_id},
        content=b"x",
    )
    assert other_path.status_code == 409
    other_op = alice.get("/v1/files", params={"path": str(target), "approval_id": approval_id})
    assert other_op.status_code == 409
    with live.client(AGENT2) as bob:
        stolen = bob.put(
            "/v1/files", params={"path": str(target), "approval_id": approval_id}, content=b"x"
        )
    assert stolen.status_code == 404


def test_a_pending_file_approval_survives_a_restart(
    tmp_path: Path, database: ServerDatabase
) -> None:
    settings = make_settings(tmp_path, database)
    target = tmp_path / "outside" / "after-restart.txt"
    target.parent.mkdir()
    with serve(settings) as first, first.client() as alice:
        asked = alice.put(
            "/v1/files", params={"path": str(target), "approval_wait": 0}, content=b"kept"
        )
        assert asked.status_code == 202
        approval_id = asked.json()["approval_id"]
    with serve(settings) as second:
        with second.client(APPROVER) as carol:
            assert carol.post(f"/v1/approvals/{approval_id}/approve").status_code == 200
        with second.client() as alice:
            done = alice.put(
                "/v1/files",
                params={"path": str(target), "approval_id": approval_id},
                content=b"kept",
            )
    assert done.status_code == 201, done.text
    assert target.read_bytes() == b"kept"


def test_an_upload_is_streamed_not_held_in_memory(alice: httpx.Client, workspace: Path) -> None:
    """The server runs in this process: the peak of Python allocations while 48 MiB go through
    stays a small fraction of the body (a buffered body would be all of it)."""
    import tracemalloc

    size, piece = 48 * 1024 * 1024, os.urandom(1024 * 1024)
    digest = hashlib.sha256()

    def body() -> Iterator[bytes]:
        for _ in range(size // len(piece)):
            digest.update(piece)
            yield piece

    tracemalloc.start()
    try:
        put = alice.put("/v1/files", params={"path": "big.bin"}, content=body())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert put.status_code == 201, put.text
    assert put.json()["sha256"] == digest.hexdigest()
    assert (workspace / "big.bin").stat().st_size == size
    assert peak < size / 4, f"peak {peak} bytes for a {size}-byte upload"
    (workspace / "big.bin").unlink()


def test_names_with_unusual_characters_are_taken_literally(
    alice: httpx.Client, workspace: Path
) -> None:
    for name in ("a\u00a0b.txt", "sp ace.txt", "percent%20.txt", "ünï©ødé.txt", "#hash?.txt"):
        put = alice.put("/v1/files", params={"path": name}, content=name.encode())
        assert put.status_code == 201, (name, put.text)
        assert (workspace / name).read_bytes() == name.encode()
        assert alice.get("/v1/files", params={"path": name}).content == name.encode()


# --- a path that changes between its judgement and the operation ------------------------------


def swap_for_link(directory: Path, target: str) -> None:
    """What a command in the workspace can do at any moment: put a symlink where a directory
    was (the directory itself kept aside)."""
    directory.rename(directory.with_name(directory.name + ".aside"))
    directory.symlink_to(target)


def test_a_directory_swapped_for_a_link_after_the_judgement_is_never_followed_on_read(
    live: LiveServer, carol: httpx.Client, outside: Path
) -> None:
    """The approver is shown `d/environ`, a plain file; while the read waits for the decision,
    `d` becomes a link to /proc/self. The read must not follow it to the server's own
    environment (every token): before, the approved read opened the path anew, links and
    all, and sent it."""
    (outside / "d").mkdir()
    (outside / "d" / "environ").write_text("harmless")
    path = str(outside / "d" / "environ")

    def read() -> httpx.Response:
        with live.client(AGENT) as client:
            return client.get("/v1/files", params={"path": path})

    waiting = in_background(read)
    approval = pending_file_approval(carol, path)
    swap_for_link(outside / "d", "/proc/self")
    carol.post(f"/v1/approvals/{approval['id']}/approve", json={})
    response = waiting.result(timeout=30)
    assert response.status_code == 409, response.text[:300]
    assert b"SHELLGATE" not in response.content and b"PATH=" not in response.content
    assert "changed" in error_of(response)["message"], response.text
    with live.client(AGENT) as client:
        operations = client.get("/v1/files/operations").json()["data"]
    record = next(op for op in operations if op["approval_id"] == approval["id"])
    assert record["state"] == "failed", record


def test_a_directory_swapped_for_a_link_after_the_judgement_is_never_followed_on_write(
    live: LiveServer, carol: httpx.Client, outside: Path
) -> None:
    """The same for an upload: the approver allowed `d/note`; `d` then became a link to
    another directory (a hidden one, such as ~/.ssh, in an attack). Nothing is written there."""
    (outside / "d").mkdir()
    elsewhere = outside / "elsewhere"
    elsewhere.mkdir()
    path = str(outside / "d" / "note")

    def write() -> httpx.Response:
        with live.client(AGENT) as client:
            return client.put("/v1/files", params={"path": path}, content=b"planted")

    waiting = in_background(write)
    approval = pending_file_approval(carol, path)
    swap_for_link(outside / "d", str(elsewhere))
    carol.post(f"/v1/approvals/{approval['id']}/approve", json={})
    response = waiting.result(timeout=30)
    assert response.status_code == 409, response.text
    assert "changed" in error_of(response)["message"], response.text
    assert list(elsewhere.iterdir()) == []
    assert list((outside / "d.aside").iterdir()) == []


def test_the_servers_own_program_is_never_written_whatever_the_rules(
    alice: httpx.Client, files_rules: Any
) -> None:
    """What no command can change (its package, its virtualenv: docs/sandbox.md), no upload
    changes either, even with every path allowed; it can still be read."""
    files_rules({"outside": "allow"})
    package = Path(__file__).resolve().parents[2] / "app"
    planted = package / f"planted-{os.getpid()}-{id(alice)}.py"
    targets = [planted, Path(sys.prefix) / "planted.pth"]
    try:
        for target in targets:
            write = alice.put("/v1/files", params={"path": str(target)}, content=b"import os\n")
            assert write.status_code == 403, write.text
            assert "the server's own program" in error_of(write)["message"]
            assert not target.exists()
        made = alice.put(
            "/v1/files",
            params={"path": str(package / "new-dir" / "x.py"), "parents": "true"},
            content=b"",
        )
        assert made.status_code == 403 and not (package / "new-dir").exists(), made.text
        check = alice.get("/v1/files/check", params={"path": str(planted), "access": "write"})
        assert check.json()["verdict"] == "deny", check.text
        read = alice.get("/v1/files", params={"path": str(package / "__init__.py")})
        assert read.status_code == 200 and b"__version__" in read.content
    finally:
        for target in targets:
            target.unlink(missing_ok=True)
        if (package / "new-dir").exists():
            shutil.rmtree(package / "new-dir")
