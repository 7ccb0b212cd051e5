"""The book: executing chapters per profile and building the offline site.

One job per module: ``errors`` (failure types) and ``extras`` (the optional dependencies check)
import nothing heavy; ``runner`` executes chapters; ``profiles`` plans the jobs; ``assets``
vendors Vega, MathJax and the bibliography; ``pages`` writes the generated pages;
``jupyterbook`` builds and swaps a site; ``site`` builds the book; ``profile_run`` serves
``kvoffload run``.
"""
