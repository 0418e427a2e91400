"""The agent layer: an LLM working inside a sandbox with three tools (execute_bash,
str_replace_editor, submit), the protocol of the LLM-in-Sandbox paper.

It imports the jail core; the core never imports it.

May import: errors, result, config, jail.
"""
