"""pytest plugins loaded into the frameworks' own test runs (``-p plugins.NAME``)."""
