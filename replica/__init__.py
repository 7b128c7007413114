"""The broker side of a node: record batches, the partition log, and produce/fetch handling."""
