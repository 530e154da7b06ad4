"""Runs on disk: a directory of parquet parts written atomically and verified on load.

Layout of a run directory::

    RUN/
      meta.json               environment metadata, the spec, the run id, the format
      trials/part-*.parquet   trial rows, one part per flush
      steps/part-*.parquet    per-step times of instrumented trials
      errors/part-*.parquet   cases that raised

One module per concern, each importing only those above it in this list:

``parts``
    one part: the results format, its checksum, atomic writes, verified reads;
``scan``
    several runs as one lazy trial table, each tagged with its environment;
``read``
    one run (or a single trial file) read back, a damaged part refused or skipped;
``write``
    :class:`RunWriter` appends parts; :func:`save` writes one file; :func:`upgrade_run`.

The public names are imported from :mod:`regimes.data.io` (and :mod:`regimes`).
"""
