"""The kernel boundary around every command: what it may see, write and reach, whatever the
policy read in its text (docs/sandbox.md)."""

from app.sandbox.boundary import Sandbox, SandboxUnavailable
from app.sandbox.defaults import default_profile
from app.sandbox.profile import SandboxProfile

__all__ = ["Sandbox", "SandboxProfile", "SandboxUnavailable", "default_profile"]
