"""Engines: what each system keeps where and moves per step, as placements and rules on the step model.

Each engine is one module of ``each`` with an ``Options`` model (the scenario's ``options:``,
validated), a ``predict(scenario) -> Prediction`` and its one declaration,
``ENGINE = EngineSpec(...)`` (``spec``); ``registry`` finds the modules of ``each`` and checks
their declarations, and ``scenario`` reads scenario files. ``each.generic`` is the step model with
the scenario's own placement.
"""
