"""The ``quoteclip`` command line, a face over the queue and the pipeline.

``launch`` is the console entry; ``app`` holds the typer app and loads only the module that declares the command
being run (a cold ``quoteclip render`` imports none of the service commands); ``options`` declares the clip
options once for every command that takes a clip. A module per command group: ``clips`` (render, enqueue, batch,
demo), ``queue`` (status, worker), ``service`` (serve, up, health), ``align``; ``batch``, ``up`` and ``demo`` are
what their commands run."""
