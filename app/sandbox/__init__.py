"""The kernel boundary around every command: what it may see, write and reach, whatever the
policy read in its text."""
