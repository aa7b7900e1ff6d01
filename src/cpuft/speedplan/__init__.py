"""The speed plan: what a run gets and why (``speed_plan``), one decision per function
(``choices``, ``allocator``), the one matmul probe (``probe``), and the steps that settle what
waits for a measurement (``resolve``). No torch at import time."""
