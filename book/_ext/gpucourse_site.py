"""Sphinx glue for the course's static website (listed in book/_config.yml, local_extensions)."""


def dedupe_scripts(app, pagename, templatename, context, doctree):
    """Drop repeated <script> tags.

    Sphinx lists an inline script added while the build runs twice (once with filename None, once
    with ''), so sphinx-thebe's `const THEBE_JS_URL = …` ran twice and threw a SyntaxError on
    every page.
    """
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (str(script.filename or ""), script.priority, tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", dedupe_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
