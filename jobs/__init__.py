"""The job files shipped with commbench (``commbench.jobs.data``): system profiles,
experiments, Jinja2 templates, the emulated fabrics and the job-side shell scripts.
Data only; read them through :mod:`commbench.resources`."""
