"""What pyproject.toml cannot say: the Alembic environment and versions stay in the top-level
`migrations/` of the repository and ship inside the wheel as the package `app.migrations`, so
that `pip install .` serves without a checkout (app/store/migrate.py finds either layout).
The client, `shellgate`, is a distribution of its own (sdk/pyproject.toml)."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(include=["app", "app.*"]),
        "app.migrations",
        "app.migrations.versions",
    ],
    package_dir={"app.migrations": "migrations"},
)
