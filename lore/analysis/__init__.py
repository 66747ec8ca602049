"""Statistics, figures and the paper from LoRe run directories (see docs/workflow.md).

``runs`` reads run directories, ``stats`` holds the pure statistics, ``aggregate`` builds the tables,
``latex``/``paper`` the LaTeX, ``figures`` the plots, ``grid`` checks workflow configs, ``cli`` the commands.
"""
