"""Who decides what runs: the policy in force, loaded at start, replaced by admins, every version
kept, and its dry run."""
