"""The papers' reference numbers and the model-validation table, shipped with commbench
(``commbench.analysis.reference``). Data only; read them through :mod:`commbench.resources`."""
