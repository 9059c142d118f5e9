"""``python -m nbgrader``, without building RFC 3987's IRI parsers at its start (issue 50).

nbgrader imports nbformat, nbformat's validator imports jsonschema's format checker, and that imports
``rfc3987_syntax``, which builds its parsers on import: about 0.7 s of CPU in every nbgrader process, for a
format no notebook uses. Importing the course first puts a stand-in under that name that imports the real
module on its first use (``gpucourse.viz.first_chart``); then this is nbgrader's own command line. The course
is imported in nbgrader's processes anyway (its preprocessors, ``nbgrader_config.py``).

    python -m gpucourse.tooling.nbgradercli autograde lab01_warps --create --force
"""

import sys

import gpucourse  # noqa: F401  (defers the IRI parsers: gpucourse.viz.first_chart)


def main() -> None:
    from nbgrader.apps.nbgraderapp import main as nbgrader_main

    nbgrader_main()


if __name__ == "__main__":
    sys.exit(main())
