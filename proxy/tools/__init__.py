"""The tools: the ``mend`` command, ``mend explain``, ``mend test`` and the error catalog."""
