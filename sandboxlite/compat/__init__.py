"""Other packages' interfaces, backed by sandboxlite (each module needs its own optional extra).

``compat.llm_in_sandbox``: the paper's package (PyPI ``llm-in-sandbox``, extra ``[paper]``).

May import: errors, config, images, jail, agent, rl, sandboxlite.
"""
