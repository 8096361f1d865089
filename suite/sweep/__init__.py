"""``commbench sweep``: every registered implementation, one launch each (``make run``,
``make cluster-run``)."""
