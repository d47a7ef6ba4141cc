"""Package-dir mapping: producers/, streams/ and sinks/ install as commwatch.*."""
from setuptools import find_packages, setup

ROOTS = {
    "commwatch": "commwatch",
    "commwatch.producers": "producers",
    "commwatch.streams": "streams",
    "commwatch.sinks": "sinks",
}

packages = []
for pkg, folder in ROOTS.items():
    packages.append(pkg)
    packages += [f"{pkg}.{sub}" for sub in find_packages(folder) if not sub.startswith("tests")]

setup(packages=packages, package_dir=ROOTS, package_data={"commwatch": ["py.typed"], "commwatch.sinks.page": ["static/*"]})
