"""Fault injection and history checking (arrives with the chaos issue)."""
