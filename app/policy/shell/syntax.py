"""The bash reader's public names, for the rest of the app (docs/policy.md).

Pure functions only: nothing in this package runs, expands or resolves anything. Three readers
live here because three consumers need three different views:

* `extract_leading_cd` (`leading_cd.py`) and `flat_segments` (`flat.py`) are small scanners
  with exactly the behaviour agents rely on (docs/api.md#processing-order,
  docs/policy.md#interceptor); they are routing helpers, not security checks, and give up
  rather than guess.
* `read_command` (and `policy_segments`, `reader.py`) is the security-relevant reader: it must
  find every simple command the shell would run, at any depth, so that `deny`/`prompt` rules
  and critical patterns cannot be dodged by wrapping (`wrappers.py`) or by handing text to
  another shell (`embedded.py`), and say what it cannot read statically so the policy can fail
  closed. The structure comes from tree-sitter-bash (`tree.py`); a small local lexer
  (`lexer.py`) dequotes words, reads backtick substitutions and unquoted here-doc bodies, and
  reads the text when the grammar reports an error.
* `rough_segments` is a plain flat tokenizer, kept as a never-failing best effort so deny
  rules still apply to text that could not be parsed.

All of them skip quotes and escapes with the one scanner in `scanner.py`.
"""

from app.policy.shell.embedded import env_scripts
from app.policy.shell.findings import CommandReading, UnparseableCommandError
from app.policy.shell.flat import (
    FlatSegment,
    flat_segments,
    has_control_syntax,
    strip_leading_assignments,
)
from app.policy.shell.leading_cd import LeadingCd, extract_leading_cd
from app.policy.shell.reader import (
    clear_segment_cache,
    policy_segments,
    read_command,
    rough_segments,
)
from app.policy.shell.words import normalize_whitespace

__all__ = [
    "CommandReading",
    "FlatSegment",
    "LeadingCd",
    "UnparseableCommandError",
    "clear_segment_cache",
    "env_scripts",
    "extract_leading_cd",
    "flat_segments",
    "has_control_syntax",
    "normalize_whitespace",
    "policy_segments",
    "read_command",
    "rough_segments",
    "strip_leading_assignments",
]
