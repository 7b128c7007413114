"""The Raft controller quorum and the metadata image (arrives with the controller issue)."""
