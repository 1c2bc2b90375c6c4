"""The pipeline shared by the inline CLI and the queue worker: a spec's key and stored clip (``lookup``, light),
then fetch → probe → render → store (``produce``), with its sidecars, results, stages and temp folders."""
