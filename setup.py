"""Maps the stage folders onto the ``servecal.*`` namespace (see docs/design.md).

``sched`` is also a standard-library module, so the folders are never importable
under their own names: ``profiler/`` is ``servecal.profiler`` and so on. Sub-packages
are found automatically, so adding ``sched/policies/`` needs no edit here.
"""

from setuptools import find_packages, setup

STAGES = ("profiler", "costmodels", "sched", "reports", "integrations")

packages = find_packages(include=["servecal", "servecal.*"])
package_dir = {"servecal": "servecal"}
for stage in STAGES:
    package_dir[f"servecal.{stage}"] = stage
    packages += [f"servecal.{p}" for p in find_packages(include=[stage, f"{stage}.*"])]

setup(packages=packages, package_dir=package_dir)
