"""See what an agent did: ``sandboxlite view`` writes one self-contained HTML page for a run.

``load_run(PATH)`` reads a run's output folder (or its trajectory.json) into one plain dict: the
task, every step (the model's text and reasoning, each tool call with its arguments, a file edit
as a diff, the output with exit code, duration, truncation and timeout), the network requests,
the output files, the answer, its score and why the run ended.  Every text is cleaned (terminal
escapes removed, control characters made visible, bytes that are not UTF-8 replaced) and capped;
files are read without following a symlink.  ``write_html(data, OUT)`` writes the page: the data
embedded as JSON no content can break out of, rendered by an inline script with ``textContent``
only, nothing fetched from the network (its Content-Security-Policy forbids it).

``load_eval(EVAL_DIR)`` reads an eval's output folder (results.jsonl, run.json, the trajectories)
into one plain dict (rows, one per task, and aggregates: accuracy per domain and mode with a
Wilson interval, tokens, steps, tool calls, failure reasons); ``write_eval(EVAL_DIR)`` writes its
page and, in the same pass, each trajectory's own page, so the rows' links work from file://.

``ViewServer(PATH, port)`` serves the live page on loopback (``sandboxlite view --serve``): it
asks for the data again every second, so new steps appear while a run or an eval still writes.

May import: errors.
"""

from ._eval import is_eval_dir, load_eval, wilson, write_eval
from ._html import render_html, write_html
from ._load import load_run, resolve
from ._serve import ViewServer

__all__ = ["ViewServer", "is_eval_dir", "load_eval", "load_run", "render_html", "resolve", "wilson", "write_eval", "write_html"]
