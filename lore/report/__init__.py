"""From run directories to statistics tables, LaTeX tables, figures and the benchmark report.

``runs`` reads run directories (``synthetic`` writes ones with known answers), ``settings`` says what the
statistics look at, ``stats`` holds the pure statistics, ``aggregate`` builds the tables, ``latex`` formats
them, ``figures`` plots them, ``benchmark_report`` writes the LLM-prior benchmark's report, ``outputs`` writes
every file atomically and ``cli`` holds the commands (``lore aggregate | figures``, ``benchmark-report``).
Nothing is imported here: the Snakefile loads :mod:`lore.report.settings` on every dry run, without pandas.
"""
