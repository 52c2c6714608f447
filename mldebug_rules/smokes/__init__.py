"""Smokes: the checks that turn a hypothesis into a cause, all in one place.

- ``args``: the ``smoke plan | run | record`` and ``gate`` command lines (cheap to build at start-up);
- ``commands``: dispatches them to ``plan`` (the pair of commands that would settle the leads), ``run`` (one
  half of a pair, run and classified), ``record`` (a result typed in by hand) and ``claim`` (``gate``: is this
  hypothesis smoke-confirmed?), which share ``common``;
- ``recipe`` (with ``overrides.yaml``): a smoke's recipe applied to the run's own command line;
- ``execute``: running one command under a timeout, its output scanned for the failure's signatures;
- ``controls`` (with ``controls.yaml``): one-variable controls paired with their baseline;
- ``outcomes``: a smoke's outcomes and pairs in words, for the report and the commands alike;
- ``state``: ``RUN_DIR/.mldebug/smokes.jsonl``, the only file the tool ever writes in a run directory.

Whether a pair confirms or refutes, and the verdict, are decided in ``engine/gate.py`` alone. This package
stays light to import: nothing here is imported until a module is named.
"""
