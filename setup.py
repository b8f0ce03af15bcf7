"""Where the wheel puts the product: its six packages go inside `sundial_scheduler/`
(sundial_scheduler/__init__.py says why and how they are found there), so that the
installed distribution adds a single, unique name to site-packages. The checkout keeps
them at its top (`python main.py`, App Engine's `main:app` and the tests import them so).
Everything else about the distribution is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

HOME = "sundial_scheduler"
PRODUCT = ("app", "cli", "config", "engine", "statemachine", "web")
# Found, not listed: a subpackage added later goes into the wheel without an edit here.
# Namespace packages too: web/templates/ui and web/static hold only package data.
SUBPACKAGES = find_namespace_packages(include=[pattern for name in PRODUCT for pattern in (name, f"{name}.*")],
                                      exclude=["*.__pycache__"])

setup(
    packages=[HOME, f"{HOME}.docs", *(f"{HOME}.{name}" for name in SUBPACKAGES)],
    # A mapped package's subpackages follow it: sundial_scheduler.engine.adapters is engine/adapters.
    package_dir={HOME: HOME, f"{HOME}.docs": "docs", **{f"{HOME}.{name}": name for name in PRODUCT}},
    package_data={
        f"{HOME}.web": ["templates/*/*.html", "static/*"],
        # The project files' JSON Schema, for editors: sundial_scheduler/docs/project.schema.json.
        f"{HOME}.docs": ["project.schema.json"],
    },
)
