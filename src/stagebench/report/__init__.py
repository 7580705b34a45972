"""Rendering of scored runs: the stage table as text, Markdown and CSV, report.html, plots, the per-query explorer, and writing them into a results folder."""
