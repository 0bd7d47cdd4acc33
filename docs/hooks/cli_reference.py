"""MkDocs hook: the command-line reference page is generated from the parser at build
time (``keras_electra.cli.reference_markdown``), so it cannot drift from the flags."""

MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    from keras_electra.cli import reference_markdown

    return markdown.replace(MARKER, reference_markdown())
