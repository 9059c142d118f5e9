"""The first chart of a new kernel without a 3-second wait that has nothing to do with the chart.

plotly's renderers import nbformat, nbformat imports jsonschema, and jsonschema's format checker
imports ``rfc3987_syntax``, which builds three Earley parsers for RFC 3987 IRIs when it is
imported: about 2.7 s of CPU in every new kernel (measured here: the first ``_repr_mimebundle_``
of a lesson figure 2.76 s, the second 0.02 s). No notebook checks an IRI, yet every learner's first
chart, every lab graded by nbgrader and every page of the website paid it.

``defer_iri_parsers()`` puts a stand-in under that name whose functions import the real module on
their first call, so a check of the "iri" format still runs exactly as before, only later.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

NAME = "rfc3987_syntax"
# what jsonschema (4.18 to 4.26) and other users take from the module by name
LAZY_FUNCTIONS = ("is_valid_syntax", "parse", "is_valid_syntax_iri", "is_valid_syntax_iri_reference")


def _real():
    """The real module, imported now (the stand-in leaves sys.modules first)."""
    if isinstance(sys.modules.get(NAME), _Deferred):
        del sys.modules[NAME]
    return importlib.import_module(NAME)


class _Deferred(types.ModuleType):
    """Stands in for rfc3987_syntax until something is asked of it."""

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):  # the import system's questions (``__path__``, ``__spec__``): not a use
            raise AttributeError(attribute)
        return getattr(_real(), attribute)


def _later(name: str):
    def call(*args, **kwargs):
        return getattr(_real(), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"rfc3987_syntax.{name}, imported on the first call (gpucourse.viz.first_chart)"
    return call


def defer_iri_parsers() -> bool:
    """Install the stand-in; True if installed. Nothing happens where the module is absent or
    jsonschema's format checker has already taken it (then the parsers are built anyway)."""
    if NAME in sys.modules or "jsonschema._format" in sys.modules or importlib.util.find_spec(NAME) is None:
        return False
    stand_in = _Deferred(NAME, "rfc3987_syntax, imported on first use (gpucourse.viz.first_chart)")
    for name in LAZY_FUNCTIONS:
        setattr(stand_in, name, _later(name))
    sys.modules[NAME] = stand_in
    return True
