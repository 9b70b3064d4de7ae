"""The verdict the other names of a hard-linked file could get (app/policy/file_rules.py,
docs/policy.md#hard-links), pure: every rule covering the access and both defaults count,
whatever their globs, because those names are unknown."""

from __future__ import annotations

from app.policy.file_rules import FileRules, judge_file, judge_other_names, stricter

ROOTS = ("/ws",)


def rules(document: dict[str, object]) -> FileRules:
    return FileRules.model_validate(document)


def test_a_file_with_one_link_has_no_other_name_to_judge() -> None:
    assert judge_other_names(rules({"outside": "deny"}), "read", "/ws/a", 1) is None


def test_any_deny_rule_covering_the_access_decides_whatever_its_glob() -> None:
    document = rules(
        {"outside": "allow", "rules": [{"match": "/srv/secret/*", "approval": "deny"}]}
    )
    verdict = judge_other_names(document, "read", "/ws/a", 3)
    assert verdict is not None
    assert verdict.approval == "deny"
    assert verdict.rule == document.rules[0]
    assert "3 hard links" in verdict.reason and "file rule /srv/secret/*" in verdict.reason


def test_a_rule_for_the_other_access_does_not_count() -> None:
    document = rules(
        {"outside": "allow", "rules": [{"match": "/etc/*", "approval": "deny", "access": "write"}]}
    )
    assert judge_other_names(document, "read", "/ws/a", 2) is None


def test_the_outside_default_stands_for_a_name_outside_the_workspace() -> None:
    verdict = judge_other_names(rules({}), "read", "/ws/a", 2)
    assert verdict is not None and verdict.approval == "prompt" and verdict.rule is None
    assert "outside-the-workspace default" in verdict.reason


def test_the_strictest_candidate_wins_not_the_first() -> None:
    document = rules(
        {
            "outside": "allow",
            "rules": [
                {"match": "/a/*", "approval": "prompt"},
                {"match": "/b/*", "approval": "deny"},
            ],
        }
    )
    verdict = judge_other_names(document, "read", "/ws/a", 2)
    assert verdict is not None and verdict.approval == "deny" and "/b/*" in verdict.reason


def test_a_path_verdict_stricter_than_the_other_names_keeps_its_reason() -> None:
    document = rules({"rules": [{"match": "/ws/*", "approval": "deny"}]})
    by_path = judge_file(document, "read", ("/ws/a",), ROOTS)
    combined = stricter(by_path, judge_other_names(document, "read", "/ws/a", 2))
    assert combined is by_path
