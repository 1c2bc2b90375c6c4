"""Jobs: content keys, the fetch → render → store pipeline, and the rq queue."""
