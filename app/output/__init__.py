"""An execution's output: the log on disk, the inline windows, frames, the live edge and what one
viewer sees."""
