"""Reports of a run: the text matrix (``matrix``), ``report.md`` (``markdown``) and
``report.html`` (``html``), all rendered from the plugin's results.json records."""
