"""The controller quorum's I/O shell: the Raft core driven over gRPC, on disk, in asyncio."""
