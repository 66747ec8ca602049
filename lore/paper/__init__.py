"""The paper's generated text: its macros, sentences and tables, its PDF build, and the README's headline table.

``build`` writes the generated parts (``paper/generated/``) and compiles the PDF; ``macros`` assembles
``macros.tex`` from ``numbers`` (the values the text cites), ``results`` (what the runs found) and ``method``
(what ran); ``readme`` writes the README's headline table from the benchmark's ``summary.csv``; ``cli`` holds the
commands (``lore paper-macros``, ``paper-build``). Nothing is imported here.
"""
