"""Helpers for running cells in the test shell."""

from __future__ import annotations


def run_cell(ip, source: str):
    """Run a cell as IPython would and return its ExecutionResult."""
    return ip.run_cell(source, store_history=True)


def profiled(ip, body: str, options: str = "-q -o r"):
    """Run ``%%tfprofile OPTIONS`` over `body`; return (ExecutionResult, ProfileResult)."""
    result = run_cell(ip, f"%%tfprofile {options}\n{body}")
    return result, ip.user_ns.get("r")
