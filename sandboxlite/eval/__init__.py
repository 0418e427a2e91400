"""``sandboxlite eval``: the paper's domains, sandbox mode against vanilla mode.

    from sandboxlite.eval import EvalConfig, run_eval
    result = run_eval(EvalConfig(domains=["math"], data_dir="eval-data", out_dir="out", modes=["sandbox", "vanilla"],
                                 limit=5), model)
    print(result.summary["domains"]["math"])

A domain is a loader (data dir -> ``EvalItem`` list) and a scorer (item, response, judge ->
``Score``); add your own with ``register_domain`` or a JSONL file (``custom.py``).

May import: errors, config, images, jail, agent, sandboxlite.
"""

from .custom import load_tasks_file
from .domains import domains, get_domain, load_domain_module, register_domain
from .items import Domain, EvalItem
from .runner import EvalConfig, EvalResult, run_eval
from .score import Score
from .summary import summarize, to_markdown

__all__ = [
    "Domain",
    "EvalConfig",
    "EvalItem",
    "EvalResult",
    "Score",
    "domains",
    "get_domain",
    "load_domain_module",
    "load_tasks_file",
    "register_domain",
    "run_eval",
    "summarize",
    "to_markdown",
]
