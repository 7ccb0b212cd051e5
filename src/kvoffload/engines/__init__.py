"""Engines: what each system keeps where and moves per step, as placements and rules on the step model.

Each engine module has an ``Options`` model (the scenario's ``options:``, validated), a
``predict(scenario) -> Prediction`` and its one declaration, ``ENGINE = EngineSpec(...)``
(``spec``); ``registry`` lists the engine modules once and checks their declarations, and
``scenario`` reads scenario files. ``generic`` is the step model with the scenario's own placement.
"""
