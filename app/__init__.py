"""The composition root: where Sundial's parts are chosen and wired together.

`bootstrap.py` builds a runtime for a backend (store, queue, targets, engine, web app,
periodic loops) through constructors only; `importer.py` reads a configs directory into
the engine; `processes.py` runs the extra dispatcher processes of `serve --processes N`.
Nothing below this package imports it: `config/` holds project files and settings,
`engine/` the shell around the pure core, `web/` and `cli/` the entry points' surfaces.
"""
