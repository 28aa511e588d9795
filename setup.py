"""Package discovery for Mirror's layout: each room is a folder at the repository root, installed
as ``mirror.<room>`` (``events/`` is ``mirror.events``).

Everything else about the project is in ``pyproject.toml``; this file only maps the folders, so a
package added to the tree is in the wheel without a list to keep (``tests/system/test_wheel.py``
builds one and imports every module from it).
"""

from setuptools import find_packages, setup

ROOMS = ("events", "projections", "cognition", "replay", "actors", "sim", "gateway", "stack", "harness", "cli")
"""The layers (bottom to top: events … actors) and the rooms beside and above them: the one list of
them. ``scripts/lint`` and ``tests/unit/test_layout.py`` read it from here (with ``ast``: importing
this file would run ``setup()``); the layout test checks the tree against it."""

package_dir = {"mirror": "mirror"}
packages = ["mirror"]
for room in ROOMS:
    package_dir[f"mirror.{room}"] = room
    packages += [f"mirror.{room}", *(f"mirror.{room}.{package}" for package in find_packages(room))]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"mirror.cognition": ["prompt_sets/*/*.md", "persona/examples/*.json", "persona/examples/*.png", "persona/prompts/*.md"], "mirror.harness.evals.memory": ["dialogues.json"],
                  "mirror.gateway.inspector": ["static/*.html", "static/*.css", "static/js/*.js"]},
    # The data is the list above and nothing else: the sdist manifest's files are not added as data too
    # (which would also warn that the folder prompt_sets/default "would be ignored" as a package).
    include_package_data=False,
)
