"""An execution's output: the log on disk and its follower, the inline windows, frames and
the live edge."""
