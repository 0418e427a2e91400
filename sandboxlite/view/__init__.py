"""See what an agent did: ``sandboxlite view`` writes one self-contained HTML page for a run.

``load_run(PATH)`` reads a run's output folder (or its trajectory.json) into one plain dict: the
task, every step (the model's text and reasoning, each tool call with its arguments, a file edit
as a diff, the output with exit code, duration, truncation and timeout), the network requests,
the output files, the answer, its score and why the run ended.  Every text is cleaned (terminal
escapes removed, control characters made visible, bytes that are not UTF-8 replaced) and capped;
files are read without following a symlink.  ``write_html(data, OUT)`` writes the page: the data
embedded as JSON no content can break out of, rendered by an inline script with ``textContent``
only, nothing fetched from the network (its Content-Security-Policy forbids it).

May import: errors.
"""

from ._html import render_html, write_html
from ._load import load_run, resolve

__all__ = ["load_run", "render_html", "resolve", "write_html"]
