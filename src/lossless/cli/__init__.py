"""The ``lossless`` command line. Only this package imports click and Rich."""
