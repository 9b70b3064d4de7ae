import json

import pytest

from app.core.errors import StaleApprovalError
from app.executions.draft import (
    DRAFT_VERSION,
    Draft,
    check_as_shown,
    pending_request_json,
    read_pending_request,
)


def test_a_stored_draft_carries_its_version_and_reads_back_equal() -> None:
    draft = Draft(original_command="cd /tmp && ls", command="ls", cwd_request="/tmp", pty=True)
    assert json.loads(draft.to_json())["version"] == DRAFT_VERSION
    assert Draft.from_json(draft.to_json()) == draft


def test_an_untagged_draft_reads_as_version_zero() -> None:
    old = {"original_command": "ls", "command": "ls", "timeout": 5, "async_": True}
    draft = Draft.from_json(json.dumps(old))
    assert (draft.command, draft.timeout, draft.async_, draft.rows) == ("ls", 5, True, 40)


def test_unknown_fields_of_a_stored_draft_are_dropped() -> None:
    draft = Draft.from_json(json.dumps({"version": 1, "command": "ls", "colour": "blue"}))
    assert draft.original_command == "ls"


@pytest.mark.parametrize(
    "stored",
    [
        {"version": DRAFT_VERSION + 1, "command": "ls"},
        {"version": "1", "command": "ls"},
        {"version": 1, "original_command": "ls"},
    ],
)
def test_a_draft_from_a_newer_server_or_without_a_command_is_refused(
    stored: dict[str, object],
) -> None:
    with pytest.raises(ValueError):
        Draft.from_json(json.dumps(stored))


def test_a_pending_request_with_an_unknown_role_is_refused() -> None:
    stored = pending_request_json("agent", Draft(original_command="ls", command="ls"))
    assert read_pending_request(stored)[0] == "agent"
    with pytest.raises(ValueError):
        read_pending_request(stored.replace('"agent"', '"root"', 1))


def test_a_call_shown_another_workspace_names_both_directories_not_a_session() -> None:
    draft = Draft(original_command="ls", command="ls", shown_cwd="/srv/replica-a/work")
    with pytest.raises(StaleApprovalError) as refused:
        check_as_shown(draft, session_env=None, base="/srv/replica-b/work")
    message = refused.value.message
    assert "/srv/replica-a/work" in message and "/srv/replica-b/work" in message
    assert "session" not in message and "nothing ran" in message


def test_a_session_call_shown_another_cwd_says_the_session_moved() -> None:
    draft = Draft(original_command="ls", command="ls", session="se_1", shown_cwd="/work/old")
    with pytest.raises(StaleApprovalError) as refused:
        check_as_shown(draft, session_env={}, base="/work/new")
    assert refused.value.message.startswith("The session's working directory changed")
