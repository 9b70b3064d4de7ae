"""Hard links through the files API (docs/policy.md#hard-links), on a real server: a file with
more than one link has names no path lookup finds, so a read of it is judged as strictly as
any of them could be; a write replaces the name it is given and never reaches the others. The
protected files live outside the workspace but on its file system (the test's tmp dir), where
`os.link` can reach them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import eventually


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server whose sandbox hides one file of its own (the files API refuses hidden paths
    with the sandbox on or off)."""
    tmp = tmp_path_factory.mktemp("hard-links")
    (tmp / "keys").mkdir()
    (tmp / "keys" / "deploy.key").write_text("hidden key")
    settings = make_settings(
        tmp, module_databases.new(), sandbox_hidden=[str(tmp / "keys" / "deploy.key")]
    )
    with serve(settings) as server:
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
def protected(tmp_path: Path) -> Path:
    """A secret outside the workspace, in a directory the tests' deny rule names."""
    directory = tmp_path / "protected"
    directory.mkdir()
    secret = directory / "secret.txt"
    secret.write_text("the secret")
    return secret


@pytest.fixture
def link(live: LiveServer, protected: Path, tmp_path: Path) -> Path:
    """A hard link to `protected` in the workspace (a name of its own per test)."""
    path = live.settings.workspace / f"link-{tmp_path.name}.txt"
    os.link(protected, path)
    return path


def deny_protected(protected: Path) -> dict[str, Any]:
    return {"rules": [{"match": f"{protected.parent}/*", "approval": "deny"}]}


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def test_a_hard_link_to_a_denied_file_is_refused_for_reading(
    alice: httpx.Client, protected: Path, link: Path, files_rules: Any
) -> None:
    files_rules(deny_protected(protected))
    for url, params in (
        ("/v1/files", {}),
        ("/v1/files/stat", {}),
        ("/v1/files/stat", {"sha256": "true"}),
    ):
        refused = alice.get(url, params={"path": link.name, **params})
        assert refused.status_code == 403, (url, params, refused.text)
        assert error_of(refused)["code"] == "policy_denied"
        message = error_of(refused)["message"]
        assert "has 2 hard links" in message and "cannot be found" in message
        assert f"file rule {protected.parent}/*" in message
    record = alice.get("/v1/files/operations").json()["data"][0]
    assert record["state"] == "denied" and record["verdict"] == "deny"


def test_the_dry_run_counts_the_links_of_a_read_but_not_of_a_write(
    alice: httpx.Client, protected: Path, link: Path, files_rules: Any
) -> None:
    files_rules(deny_protected(protected))
    read = alice.get("/v1/files/check", params={"path": link.name}).json()
    assert read["verdict"] == "deny" and "2 hard links" in read["reason"]
    assert read["rule"] == {"match": f"{protected.parent}/*", "approval": "deny", "access": "any"}
    write = alice.get("/v1/files/check", params={"path": link.name, "access": "write"}).json()
    assert write["verdict"] == "allow"


def test_a_single_link_file_is_judged_by_its_path_alone(
    alice: httpx.Client, live: LiveServer, protected: Path, tmp_path: Path, files_rules: Any
) -> None:
    files_rules(deny_protected(protected))
    plain = live.settings.workspace / f"plain-{tmp_path.name}.txt"
    plain.write_text("plain")
    assert alice.get("/v1/files", params={"path": plain.name}).text == "plain"
    assert alice.get("/v1/files/stat", params={"path": plain.name}).status_code == 200


def test_a_write_to_a_hard_link_replaces_that_name_and_not_the_protected_file(
    alice: httpx.Client, protected: Path, link: Path, files_rules: Any
) -> None:
    files_rules(deny_protected(protected))
    written = alice.put("/v1/files", params={"path": link.name}, content=b"new content")
    assert written.status_code == 201, written.text
    assert protected.read_text() == "the secret"
    assert link.read_bytes() == b"new content"
    assert os.stat(protected).st_nlink == 1 and os.stat(link).st_nlink == 1


def test_a_write_to_a_hard_link_does_not_take_the_protected_files_mode(
    alice: httpx.Client, protected: Path, link: Path, files_rules: Any
) -> None:
    """The mode is the protected name's too: copied, it would tell the caller something of a
    file it may not read. The new file gets the mode of any new file instead."""
    files_rules(deny_protected(protected))
    os.chmod(protected, 0o640)
    written = alice.put("/v1/files", params={"path": link.name}, content=b"new content")
    assert written.status_code == 201, written.text
    assert written.json()["mode"] != "0640", written.json()
    assert stat.S_IMODE(os.stat(link).st_mode) != 0o640
    assert stat.S_IMODE(os.stat(protected).st_mode) == 0o640


def test_a_hard_link_is_read_when_no_name_could_be_judged_more_than_allow(
    alice: httpx.Client, link: Path, files_rules: Any
) -> None:
    files_rules(
        {
            "outside": "allow",
            "rules": [{"match": "/nowhere/*", "approval": "deny", "access": "write"}],
        }
    )
    assert alice.get("/v1/files", params={"path": link.name}).text == "the secret"


def test_by_default_a_hard_link_is_held_as_a_name_outside_the_workspace_would_be(
    alice: httpx.Client, carol: httpx.Client, link: Path
) -> None:
    asked = alice.get("/v1/files", params={"path": link.name, "approval_wait": 0})
    assert asked.status_code == 202, asked.text
    record = asked.json()
    assert record["verdict"] == "prompt" and "hard links" in record["reason"]
    approval = carol.get(f"/v1/approvals/{record['approval_id']}").json()
    assert approval["command"] == f"[file read] {link} (2 hard links)"
    assert "outside-the-workspace default" in approval["reason"]


def test_a_hard_link_swapped_in_after_the_judgement_reads_nothing(
    live: LiveServer,
    carol: httpx.Client,
    protected: Path,
    tmp_path: Path,
    files_rules: Any,
) -> None:
    """Judged as a single-link file (prompted: the workspace prompts here), the name becomes a
    hard link to the protected file while the call holds for its approval; the read opens it
    after the approval and finds the links on the descriptor it would send."""
    files_rules({"workspace": "prompt", **deny_protected(protected)})
    name = live.settings.workspace / f"swapped-{tmp_path.name}.txt"
    name.write_text("harmless")

    def read() -> httpx.Response:
        with live.client(AGENT) as client:
            return client.get("/v1/files", params={"path": name.name})

    pool = ThreadPoolExecutor(max_workers=1)
    waiting: Future[httpx.Response] = pool.submit(read)
    pool.shutdown(wait=False)

    def pending() -> dict[str, Any] | None:
        items = carol.get("/v1/approvals", params={"state": "pending"}).json()["data"]
        return next((item for item in items if str(name) in item["command"]), None)

    approval = eventually(pending, what="the read's approval")
    assert approval["command"] == f"[file read] {name}"  # one link when judged
    staged = tmp_path / "staged"
    os.link(protected, staged)
    os.replace(staged, name)
    assert carol.post(f"/v1/approvals/{approval['id']}/approve", json={}).status_code == 200
    response = waiting.result(timeout=30)
    assert response.status_code == 403, response.text
    assert "the secret" not in response.text
    assert "has 2 hard links" in error_of(response)["message"]


def test_a_hard_link_to_a_file_the_sandbox_hides_is_refused_whatever_the_rules(
    alice: httpx.Client, live: LiveServer, tmp_path: Path, files_rules: Any
) -> None:
    files_rules({"outside": "allow"})
    hidden = live.settings.workspace.parent / "keys" / "deploy.key"
    name = live.settings.workspace / f"key-{tmp_path.name}"
    os.link(hidden, name)
    for url in ("/v1/files", "/v1/files/stat"):
        refused = alice.get(url, params={"path": name.name})
        assert refused.status_code == 403, refused.text
        assert error_of(refused)["message"] == (
            f"{name} is another name (a hard link) of {hidden}, which is hidden by the "
            "sandbox (docs/sandbox.md)"
        )
    assert alice.get("/v1/files/check", params={"path": name.name}).json()["verdict"] == "deny"
