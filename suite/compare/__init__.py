"""``commbench compare``: two runs (or two implementations) point by point, with intervals
and verdicts (:mod:`commbench.analysis.compare`), as a table, a page and an exit status."""
