"""Declared experiments: a declaration checked, its runs planned and launched, compared paired by seed, decided.

``declaration`` loads and checks ``config/experiments/<name>.yaml``, ``plan`` finds the runs it needs,
``launch`` says each run's state, the order the missing ones train in and the cost, ``compare`` applies the
decision rule, ``log`` keeps the records and writes ``docs/experiments.md``, ``recheck`` re-checks a record from
the archive, and ``cli`` is ``lore experiments ...``. Nothing is imported here.
"""
