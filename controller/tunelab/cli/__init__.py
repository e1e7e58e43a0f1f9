"""The ``tunelab`` command line: laptop commands and the controller daemon."""
