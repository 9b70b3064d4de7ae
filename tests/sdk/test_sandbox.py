"""The SDK's `sandbox=` on run and start (docs/sdk.md): asking beyond the profile is an approval
of kind `sandbox`, typed on the SDK's Approval."""

from __future__ import annotations

from pathlib import Path

from shellgate import Client


def test_run_with_a_sandbox_beyond_the_profile_waits_for_a_sandbox_approval(
    client: Client, approver: Client, tmp_path: Path
) -> None:
    outside = tmp_path / "out"
    outside.mkdir()
    sandbox = {"write": [str(outside)], "justification": "writes its report there"}
    held = client.run(f"echo hi > {outside}/r", sandbox=sandbox, approval_wait=0, follow=False)
    assert held.state == "awaiting_approval"
    assert held.approval is not None
    approval = approver.get_approval(held.approval.id)
    assert approval.kind == "sandbox"
    assert approval.sandbox_request is not None
    assert approval.sandbox_request["write"] == [str(outside)]
    assert approval.sandbox_request["justification"] == "writes its report there"
    approver.approve(approval.id)
    assert client.wait(held.id).state == "completed"
    assert (outside / "r").read_text() == "hi\n"
    job = client.start(f"echo job > {outside}/j", sandbox={"write": [str(outside)]})
    assert job.state == "awaiting_approval"
    approver.deny(job.approval.id if job.approval else "")
    assert client.wait(job.id).state == "rejected"
    assert not (outside / "j").exists()
