"""Settings for the whole suite.

Hypothesis checks each example against a deadline (200 ms by default): on a loaded 2-core
machine a large example can take longer, and the test then fails for time, not for what
it checks (``test_a_frame_receiver_gives_every_frame_whole_and_in_order_however_reads_split``
failed so once in 25 runs beside chaos runs). Tests assert behaviour, never timing, so no
property test has a deadline.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("lograft", deadline=None)
settings.load_profile("lograft")
