"""The book's analysis: one module per page, returning tables, figures and numbers, never sentences.

The pages import these modules (they run with ``book/`` as their working directory); the method and the
experiment harness stay in :mod:`paperlib`.
"""
