"""The on-disk partition log: segments, indexes, recovery, retention and flushing."""
